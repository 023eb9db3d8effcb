//! A seeded generator of random well-typed graphs (primitive or with composites, some
//! with axes thousands long) and inputs that keep index parameters in range.

use ferrite_ir::{
    ArgReduceOp, BinaryOp, DType, Graph, Op, ReduceOp, Scalar, SplitMix64, Tensor, TensorType,
    UnaryOp, ValueId,
};

/// A generated graph and, for each parameter, the exclusive bound of its values when it
/// holds indices (so `index_select`/`gather` stay in range).
pub struct RandomGraph {
    pub graph: Graph,
    pub index_bounds: Vec<Option<usize>>,
}

struct Gen {
    rng: SplitMix64,
    g: Graph,
    values: Vec<ValueId>,
    index_bounds: Vec<Option<usize>>,
    composites: bool,
    /// Some axes thousands long, so reductions and GEMMs loop over blocks.
    big: bool,
    /// Edge cases ([`random_edge_graph`]): extents 0 and 1 more often, broadcast operands,
    /// special literals (NaN, infinities, signed zeros, subnormals, huge values, integer
    /// extremes), pads and slices that empty a tensor, an occasional long axis.
    edge: bool,
}

impl Gen {
    fn below(&mut self, n: usize) -> usize {
        (self.rng.next() % n.max(1) as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.rng.next() % 100 < percent
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    /// A new parameter whose shape broadcasts against `xt`: some axes 1, leading axes
    /// dropped or added.
    fn broadcast_param(&mut self, xt: &TensorType) -> Option<ValueId> {
        let mut shape: Vec<usize> = xt
            .shape
            .iter()
            .map(|&d| if self.chance(50) { 1 } else { d })
            .collect();
        if !shape.is_empty() && self.chance(30) {
            shape.drain(..1 + self.below(shape.len()));
        } else if shape.len() < 4 && self.chance(20) {
            shape.insert(0, 1 + self.below(3));
        }
        let ty = TensorType::new(xt.dtype, shape).ok()?;
        Some(self.param(ty, None))
    }

    /// A recent value more often than an old one.
    fn value(&mut self) -> ValueId {
        let n = self.values.len();
        let i = if self.chance(60) {
            n - 1 - self.below(n.min(3))
        } else {
            self.below(n)
        };
        self.values[i]
    }

    fn shape(&mut self, max_rank: usize) -> Vec<usize> {
        let rank = self.below(max_rank + 1);
        let (zero, one) = if self.edge { (10, 25) } else { (3, 0) };
        let mut shape: Vec<usize> = (0..rank)
            .map(|_| {
                if self.chance(zero) {
                    0
                } else if one > 0 && self.chance(one) {
                    1
                } else if self.edge && self.chance(3) {
                    // An occasional long axis.
                    300 + self.below(1700)
                } else if self.chance(15) {
                    6 + self.below(4)
                } else {
                    1 + self.below(5)
                }
            })
            .collect();
        if self.edge {
            // Keep edge-case tensors small: shrink the largest axis until they are.
            while shape.iter().product::<usize>() > EDGE_MAX_ELEMENTS {
                let i = (0..rank).max_by_key(|&i| shape[i]).unwrap_or(0);
                shape[i] /= 2;
            }
        }
        // One long axis, the others shrunk until the tensor stays small.
        if self.big && rank > 0 && self.chance(40) {
            let long = self.below(rank);
            shape[long] = 1000 + self.below(5000);
            while shape.iter().product::<usize>() > 40_000 {
                let (i, _) = shape
                    .iter()
                    .enumerate()
                    .filter(|&(i, _)| i != long)
                    .max_by_key(|&(_, d)| *d)
                    .unwrap_or((long, &0));
                shape[i] = if i == long { shape[i] / 2 } else { 1 };
            }
        }
        shape
    }

    /// f32 half the time (four extra draws), else any of [`FUZZ_DTYPES`].
    fn dtype(&mut self) -> DType {
        let n = FUZZ_DTYPES.len() + 4;
        match self.below(n) {
            i if i < 4 => DType::F32,
            i => FUZZ_DTYPES[i - 4],
        }
    }

    fn param(&mut self, ty: TensorType, bound: Option<usize>) -> ValueId {
        let name = format!("p{}", self.g.params.len());
        let v = self.g.add_param(name, ty).expect("valid param");
        self.index_bounds.push(bound);
        v
    }

    fn literal_for(&mut self, dtype: DType) -> ValueId {
        if self.edge && self.chance(30) {
            let value = match dtype {
                d if d.is_float() => Scalar::Float(self.pick(&SPECIAL_FLOATS)),
                DType::Bool => Scalar::Bool(self.chance(50)),
                DType::I32 => Scalar::Int(self.pick(&SPECIAL_I32)),
                _ => Scalar::Int(self.pick(&SPECIAL_I64)),
            };
            // Only what the `.fg` parser accepts beside a tensor of `dtype` (a finite value
            // must stay finite), so the printed graph parses again.
            let f = value.as_f64();
            let fits = !f.is_finite()
                || match dtype {
                    // Beyond these, rounding to the dtype overflows.
                    DType::F16 => f.abs() < 65520.0,
                    DType::Bf16 => f.abs() < 3.396e38,
                    DType::F32 => (f as f32).is_finite(),
                    _ => true,
                };
            if fits {
                if let Ok(v) = self.g.add_literal(value, dtype) {
                    return v;
                }
            }
        }
        let value = match dtype {
            d if d.is_float() => Scalar::Float(self.pick(&[0.5, -1.25, 2.0, 0.0, 3.0])),
            DType::Bool => Scalar::Bool(self.chance(50)),
            // Unsigned dtypes (which the bitwise ops cast to) take no negative literal.
            d if d.is_unsigned() => Scalar::Int(self.pick(&[0, 1, 2, 3, 7])),
            _ => Scalar::Int(self.pick(&[0, 1, 2, -3, 7])),
        };
        self.g.add_literal(value, dtype).expect("valid literal")
    }

    fn axis(&mut self, rank: usize) -> i64 {
        let a = self.below(rank.max(1)) as i64;
        if self.chance(30) {
            a - rank.max(1) as i64
        } else {
            a
        }
    }

    /// One random op; `None` when the attempt did not type-check.
    fn op(&mut self) -> Option<ValueId> {
        let x = self.value();
        let xt = self.g.ty(x).clone();
        let rank = xt.rank();
        let kind = self.below(if self.composites { 24 } else { 20 });
        let (op, inputs): (Op, Vec<ValueId>) = match kind {
            0..=2 => {
                let primitive: Vec<UnaryOp> = UnaryOp::ALL
                    .into_iter()
                    .filter(|u| !u.is_composite())
                    .collect();
                let u = self.pick(&primitive);
                (Op::Unary(u), vec![x])
            }
            3..=6 => {
                let b = self.pick(&BinaryOp::ALL);
                if b == BinaryOp::Pow && !xt.dtype.is_float() {
                    return None; // integer pow of a negative exponent is an error
                }
                if b.is_integer_division() {
                    // Zero divisors are errors; tests/parity.rs covers these ops.
                    return None;
                }
                if b.is_bitwise() {
                    return self.bitwise(b, x);
                }
                let y = if self.edge && self.chance(30) {
                    self.broadcast_param(&xt)?
                } else if self.chance(35) {
                    self.literal_for(xt.dtype)
                } else {
                    self.value()
                };
                if self.chance(50) {
                    (Op::Binary(b), vec![x, y])
                } else {
                    (Op::Binary(b), vec![y, x])
                }
            }
            7 => {
                let c = if xt.dtype == DType::Bool {
                    x
                } else {
                    let zero = self.literal_for(xt.dtype);
                    self.g
                        .add(Op::Binary(BinaryOp::Gt), &[x, zero], None)
                        .ok()?
                };
                let a = self.value();
                let b = if self.chance(40) {
                    let d = self.g.ty(a).dtype;
                    self.literal_for(d)
                } else {
                    self.value()
                };
                (Op::Where, vec![c, a, b])
            }
            8 => {
                let to = self.dtype();
                (Op::Cast { to }, vec![x])
            }
            9 | 10 => {
                let op = self.pick(&[ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod]);
                let axes = if self.chance(25) || rank == 0 {
                    None
                } else {
                    let mut axes = Vec::new();
                    for a in 0..rank {
                        if self.chance(50) {
                            axes.push(if self.chance(30) {
                                a as i64 - rank as i64
                            } else {
                                a as i64
                            });
                        }
                    }
                    if axes.is_empty() {
                        axes.push(self.axis(rank));
                    }
                    Some(axes)
                };
                let keepdim = self.chance(50);
                (Op::Reduce { op, axes, keepdim }, vec![x])
            }
            11 => {
                let op = self.pick(&[ArgReduceOp::ArgMax, ArgReduceOp::ArgMin]);
                let axis = if self.chance(30) {
                    None
                } else {
                    Some(self.axis(rank))
                };
                let keepdim = self.chance(50);
                (Op::ArgReduce { op, axis, keepdim }, vec![x])
            }
            12 => {
                if rank == 0 || xt.dtype == DType::Bool {
                    return None;
                }
                let k = xt.shape[rank - 1];
                let n = 1 + self.below(4);
                let shape = match self.below(4) {
                    0 => vec![k],
                    1 | 2 => vec![k, n],
                    _ => vec![1 + self.below(2), k, n],
                };
                let y = self.param(TensorType::new(xt.dtype, shape).ok()?, None);
                if self.chance(20) && rank == 2 {
                    // A transposed weight: folds into the GEMM's strides.
                    let w = self.param(TensorType::new(xt.dtype, vec![n, k]).ok()?, None);
                    let wt = self
                        .g
                        .add(Op::Permute { dims: vec![1, 0] }, &[w], None)
                        .ok()?;
                    (Op::MatMul, vec![x, wt])
                } else {
                    (Op::MatMul, vec![x, y])
                }
            }
            13 => {
                // Reshape into a random regrouping of the element count.
                let n = xt.numel();
                if n == 0 && self.edge {
                    // An empty value regrouped: any shape with an extent 0.
                    let mut shape: Vec<i64> = (0..1 + self.below(3))
                        .map(|_| self.below(4) as i64)
                        .collect();
                    let z = self.below(shape.len());
                    shape[z] = 0;
                    return self.finish(Op::Reshape { shape }, vec![x]);
                }
                if n == 0 {
                    return None;
                }
                let mut factors = Vec::new();
                let mut m = n;
                let mut p = 2;
                while m > 1 {
                    if m.is_multiple_of(p) {
                        factors.push(p);
                        m /= p;
                    } else {
                        p += 1;
                    }
                }
                let mut shape: Vec<i64> = vec![1; 1 + self.below(3)];
                for f in factors {
                    let i = self.below(shape.len());
                    shape[i] *= f as i64;
                }
                if self.chance(30) {
                    let i = self.below(shape.len());
                    shape[i] = -1;
                }
                (Op::Reshape { shape }, vec![x])
            }
            14 => {
                let mut dims: Vec<i64> = (0..rank as i64).collect();
                for i in (1..dims.len()).rev() {
                    let j = self.below(i + 1);
                    dims.swap(i, j);
                }
                (Op::Permute { dims }, vec![x])
            }
            15 => {
                let mut shape: Vec<i64> = xt
                    .shape
                    .iter()
                    .map(|&d| {
                        if d == 1 {
                            1 + self.below(4) as i64
                        } else {
                            d as i64
                        }
                    })
                    .collect();
                if self.chance(40) {
                    shape.insert(0, 1 + self.below(3) as i64);
                }
                (Op::Expand { shape }, vec![x])
            }
            16 => {
                if rank == 0 {
                    return None;
                }
                let axis = self.axis(rank);
                let d = xt.shape[(axis.rem_euclid(rank as i64)) as usize] as i64;
                let start = self.below(d as usize + 1) as i64 - if self.chance(30) { d } else { 0 };
                let end = if self.chance(40) {
                    i64::MAX
                } else {
                    self.below(d as usize + 2) as i64 - if self.chance(20) { d } else { 0 }
                };
                let step = 1 + self.below(3) as i64;
                (
                    Op::Slice {
                        axis,
                        start,
                        end,
                        step,
                    },
                    vec![x],
                )
            }
            17 => {
                if rank == 0 {
                    return None;
                }
                let axis = self.axis(rank);
                let mut ins = vec![x];
                for _ in 0..1 + self.below(2) {
                    let y = self.value();
                    ins.push(if self.chance(50) { y } else { x });
                }
                (Op::Concat { axis }, ins)
            }
            18 => {
                let pads: Vec<i64> = (0..2 * rank)
                    .map(|k| {
                        if self.edge && self.chance(15) {
                            // Cut an axis away entirely (or nearly).
                            -(xt.shape[k / 2] as i64) + self.below(2) as i64
                        } else {
                            self.below(4) as i64 - 1
                        }
                    })
                    .collect();
                let value = if xt.dtype.is_float() {
                    self.pick(&[0.0, 1.5, -2.0])
                } else {
                    self.pick(&[0.0, 1.0])
                };
                (Op::Pad { pads, value }, vec![x])
            }
            19 => {
                if rank == 0 {
                    return None;
                }
                let axis = self.axis(rank);
                let a = axis.rem_euclid(rank as i64) as usize;
                let extent = xt.shape[a];
                if extent == 0 {
                    return None;
                }
                let idt = self.pick(&[DType::I64, DType::I32]);
                if self.chance(50) {
                    // An index of rank 0 to 2 (numpy `take`), mostly 1-D.
                    let irank = [1, 1, 0, 2][self.below(4)];
                    let ishape: Vec<usize> = (0..irank).map(|_| 1 + self.below(5)).collect();
                    let idx = self.param(TensorType::new(idt, ishape).ok()?, Some(extent));
                    (Op::IndexSelect { axis }, vec![x, idx])
                } else {
                    let ishape: Vec<usize> = xt
                        .shape
                        .iter()
                        .enumerate()
                        .map(|(i, &d)| {
                            if i == a {
                                1 + self.below(4)
                            } else if self.chance(25) {
                                1
                            } else {
                                d
                            }
                        })
                        .collect();
                    let idx = self.param(TensorType::new(idt, ishape).ok()?, Some(extent));
                    (Op::Gather { axis }, vec![x, idx])
                }
            }
            20 => (
                Op::Softmax {
                    axis: self.axis(rank),
                },
                vec![x],
            ),
            21 => {
                if rank == 0 || !xt.dtype.is_float() {
                    return None;
                }
                let last = xt.shape[rank - 1];
                let w = self.param(TensorType::new(xt.dtype, vec![last]).ok()?, None);
                let b = self.param(TensorType::new(xt.dtype, vec![last]).ok()?, None);
                (Op::LayerNorm { eps: 1e-5 }, vec![x, w, b])
            }
            22 => {
                let u = self.pick(&[
                    UnaryOp::Relu,
                    UnaryOp::Sigmoid,
                    UnaryOp::Gelu,
                    UnaryOp::Silu,
                ]);
                (Op::Unary(u), vec![x])
            }
            _ => {
                if self.chance(50) {
                    (
                        Op::Reduce {
                            op: ReduceOp::Mean,
                            axes: Some(vec![-1]),
                            keepdim: true,
                        },
                        vec![x],
                    )
                } else {
                    (Op::LogSoftmax { axis: -1 }, vec![x])
                }
            }
        };
        self.finish(op, inputs)
    }

    /// A bitwise op or shift of `x`, cast first to an integer when it is a float (or a
    /// bool, for the shifts), so that these ops, which take integers only, meet the rest
    /// of the graph; shift amounts are often at the edges: 0, 1, the width and its
    /// neighbours, -1.
    fn bitwise(&mut self, b: BinaryOp, x: ValueId) -> Option<ValueId> {
        let d = self.g.ty(x).dtype;
        let x = if d.is_float() || (b.is_shift() && d == DType::Bool) {
            let to = self.pick(&[DType::I32, DType::I64, DType::U8, DType::U64]);
            self.g.add(Op::Cast { to }, &[x], None).ok()?
        } else {
            x
        };
        let xt = self.g.ty(x).clone();
        let y = if b.is_shift() && self.chance(50) {
            let bits = 8 * xt.dtype.size_bytes() as i64;
            let s = self.pick(&[0, 1, bits - 1, bits, bits + 1, -1]);
            match self.g.add_literal(Scalar::Int(s), xt.dtype) {
                Ok(v) => v,
                Err(_) => self.literal_for(xt.dtype),
            }
        } else if self.edge && self.chance(30) {
            self.broadcast_param(&xt)?
        } else if self.chance(35) {
            self.literal_for(xt.dtype)
        } else {
            self.value()
        };
        let inputs = if self.chance(50) {
            vec![x, y]
        } else {
            vec![y, x]
        };
        self.finish(Op::Binary(b), inputs)
    }

    /// Adds the op; `None` when it does not type-check or its result is too large.
    fn finish(&mut self, op: Op, inputs: Vec<ValueId>) -> Option<ValueId> {
        let v = self.g.add(op, &inputs, None).ok()?;
        // Keep tensors small so evaluation stays fast.
        let cap = if self.big {
            40_000
        } else if self.edge {
            EDGE_MAX_ELEMENTS
        } else {
            4096
        };
        if self.g.ty(v).numel() > cap {
            return None;
        }
        Some(v)
    }
}

/// The most elements of a tensor in an edge-case graph.
const EDGE_MAX_ELEMENTS: usize = 8192;

/// The dtypes the generators draw from: random graphs, their inputs, the `.npy` seeds of
/// `tests/fuzz.rs`. A new dtype is one more line here.
pub const FUZZ_DTYPES: &[DType] = &[
    DType::F32,
    DType::F16,
    DType::Bf16,
    DType::I32,
    DType::I64,
    DType::Bool,
];

/// Float special values: NaN, infinities, signed zeros, an f32 subnormal, the largest
/// f16, values that overflow f32 and f16 when added or squared, and ordinary ones.
pub const SPECIAL_FLOATS: [f64; 14] = [
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    0.0,
    -0.0,
    1e-40,
    -1e-45,
    3e38,
    -3.4e38,
    65504.0,
    1e20,
    -1.0,
    0.5,
    2.0,
];

/// i32 edge values.
pub const SPECIAL_I32: [i64; 6] = [i32::MIN as i64, i32::MAX as i64, -1, 0, 1, 65536];

/// i64 edge values.
pub const SPECIAL_I64: [i64; 7] = [i64::MIN, i64::MAX, -1, 0, 1, 1 << 32, i32::MIN as i64];

/// A random graph from `seed`: a few parameters and up to `max_ops` ops; composite
/// ops (softmax, layer_norm, gelu, ..) too when `composites` is set.
pub fn random_graph(seed: u64, max_ops: usize, composites: bool) -> RandomGraph {
    random_graph_with(seed, max_ops, composites, false)
}

/// [`random_graph`], optionally with one axis of some tensors 1000-6000 long (`big`), so
/// backends that block long rows (the tile lowering) exercise their block loops.
pub fn random_graph_with(seed: u64, max_ops: usize, composites: bool, big: bool) -> RandomGraph {
    generate(seed, max_ops, composites, big, false)
}

/// A random graph for the whole-pipeline fuzzer: composites included, and the edge cases
/// the other generators rarely make: extents 0 and 1 often, broadcast operands, special
/// literals (NaN, infinities, signed zeros, subnormals, huge values, integer extremes),
/// pads and slices that empty a tensor, an occasional axis hundreds long. Pair it with
/// [`edge_inputs`].
pub fn random_edge_graph(seed: u64, max_ops: usize) -> RandomGraph {
    generate(seed, max_ops, true, false, true)
}

fn generate(seed: u64, max_ops: usize, composites: bool, big: bool, edge: bool) -> RandomGraph {
    let mut gen = Gen {
        rng: SplitMix64(seed),
        g: Graph::new(format!("random{seed}")),
        values: Vec::new(),
        index_bounds: Vec::new(),
        composites,
        big,
        edge,
    };
    for _ in 0..1 + gen.below(3) {
        let dtype = gen.dtype();
        let max_rank = if gen.chance(20) { 4 } else { 3 };
        let shape = gen.shape(max_rank);
        let ty = TensorType::new(dtype, shape).expect("small shape");
        let p = gen.param(ty, None);
        gen.values.push(p);
    }
    // Occasionally a creation op to build on.
    if gen.chance(20) {
        let op = if gen.chance(50) {
            Op::Full {
                shape: vec![1 + gen.below(4), 1 + gen.below(4)],
                value: 1.5,
                dtype: DType::F32,
            }
        } else {
            Op::Arange {
                start: gen.below(5) as f64,
                end: 12.0,
                step: gen.pick(&[1.0, 2.0, 0.5]),
                dtype: gen.pick(&[DType::I64, DType::F32, DType::I32]),
            }
        };
        if let Ok(v) = gen.g.add(op, &[], None) {
            gen.values.push(v);
        }
    }
    let n_ops = 2 + gen.below(max_ops.max(3) - 1);
    let mut made = 0;
    let mut attempts = 0;
    while made < n_ops && attempts < n_ops * 30 {
        attempts += 1;
        if let Some(v) = gen.op() {
            gen.values.push(v);
            made += 1;
        }
    }
    let last = *gen.values.last().expect("a value");
    let mut outputs = vec![last];
    for _ in 0..gen.below(3) {
        let v = gen.value();
        outputs.push(v);
    }
    if gen.chance(10) {
        outputs.push(gen.g.params[0]);
    }
    gen.g.outputs = outputs;
    RandomGraph {
        graph: gen.g,
        index_bounds: gen.index_bounds,
    }
}

/// Inputs for a generated graph: random data, index parameters within their bounds.
pub fn inputs_for(rg: &RandomGraph, seed: u64) -> Vec<Tensor> {
    let g = &rg.graph;
    g.params
        .iter()
        .zip(&rg.index_bounds)
        .enumerate()
        .map(|(i, (&p, bound))| {
            let ty = g.ty(p);
            match bound {
                Some(b) => {
                    let mut rng = SplitMix64(seed ^ (i as u64 * 7919));
                    let v: Vec<i64> = (0..ty.numel())
                        .map(|_| (rng.next() % *b as u64) as i64)
                        .collect();
                    Tensor::from_i64(ty, &v)
                }
                None => Tensor::random(ty, seed.wrapping_add(i as u64)),
            }
        })
        .collect()
}

/// [`inputs_for`] with special values mixed in: in about half of the parameters, a quarter
/// of the elements replaced by NaN, infinities, signed zeros, subnormals, huge values
/// ([`SPECIAL_FLOATS`]) or integer extremes ([`SPECIAL_I32`], [`SPECIAL_I64`]). Index
/// parameters stay in range.
pub fn edge_inputs(rg: &RandomGraph, seed: u64) -> Vec<Tensor> {
    edge_inputs_with(rg, seed, true)
}

/// The magnitudes in [`SPECIAL_FLOATS`] that overflow f32 (or f16) arithmetic long before
/// they overflow the interpreter's f64.
fn is_huge(x: f64) -> bool {
    x.is_finite() && x.abs() >= 65504.0
}

/// [`edge_inputs`], without the huge finite values when `huge` is false: with them, a sum,
/// product or variance that overflows in f32 on the backends but not in the interpreter's
/// f64 diverges (reliability finding F14), which hides everything else.
pub fn edge_inputs_with(rg: &RandomGraph, seed: u64, huge: bool) -> Vec<Tensor> {
    let specials: Vec<f64> = SPECIAL_FLOATS
        .into_iter()
        .filter(|&x| huge || !is_huge(x))
        .collect();
    let mut rng = SplitMix64(seed ^ 0xed9e);
    inputs_for(rg, seed)
        .into_iter()
        .zip(&rg.index_bounds)
        .map(|(t, bound)| {
            if bound.is_some() || rng.next().is_multiple_of(2) {
                return t;
            }
            let pick = |rng: &mut SplitMix64, n: usize| (rng.next() % n as u64) as usize;
            match t.ty.dtype {
                DType::Bool => t,
                d if d.is_float() => {
                    let mut v = t.to_f64();
                    for x in v.iter_mut() {
                        if rng.next().is_multiple_of(4) {
                            *x = specials[pick(&mut rng, specials.len())];
                        }
                    }
                    Tensor::from_f64(&t.ty, &v)
                }
                d => {
                    let special: &[i64] = if d == DType::I32 {
                        &SPECIAL_I32
                    } else {
                        &SPECIAL_I64
                    };
                    let mut v = t.to_i64();
                    for x in v.iter_mut() {
                        if rng.next().is_multiple_of(4) {
                            *x = special[pick(&mut rng, special.len())];
                        }
                    }
                    Tensor::from_i64(&t.ty, &v)
                }
            }
        })
        .collect()
}

/// Random inputs for every parameter of `g`.
pub fn random_inputs(g: &Graph, seed: u64) -> Vec<Tensor> {
    g.param_types()
        .iter()
        .enumerate()
        .map(|(i, t)| Tensor::random(t, seed.wrapping_add(i as u64)))
        .collect()
}
