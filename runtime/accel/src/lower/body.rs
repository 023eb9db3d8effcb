//! A stage body as tile code: every live loop-IR node, computed at the shape of
//! the tile axes it depends on, loads and stores as masked pointer tiles.
//!
//! - A load is `load(buf + offsets, mask, other)`: the mask switches off lanes
//!   outside the domain (tails of partial blocks) and lanes where a pad or
//!   concat guard fails, which then read `other` and touch no memory.
//! - A data-dependent index (`index_select`, `gather`) is a loaded index tile
//!   used in the offsets. The loop IR checks it against its axis; here an index
//!   outside the axis turns the access's offset into -1, so the simulator stops
//!   with an out-of-bounds error naming the kernel, program and access instead
//!   of reading a neighbouring row.
//! - A node used more than once and every load are bound to names; a node used
//!   once is offered for sharing ([`Builder::share`]): written in place into its
//!   user, unless the kernel computes the same expression elsewhere too or it
//!   nests too deep.

use super::builder::{
    add, and, bin, boolean, call, call_kw, cast, ge, int, lt, not, or, param, tuple, where_,
    Builder, Depth, E,
};
use super::frame::{int_tile, plus, sum_terms, terms, Frame, Int};
use super::ops::{self, lit, TileVal, Val};
use crate::error::{Error, Result};
use crate::tile::ast::{BinaryOp as TBin, Builtin};
use ferrite_ir::loops::{AccId, Block, BufferId, ExprOp, ExprRef, IndexExpr, Load, StoreOp, Value};
use ferrite_ir::{BinaryOp, DType};
use std::collections::{HashMap, HashSet};

/// What a stage body sees besides its own nodes.
pub(super) struct Scope<'a> {
    /// The kernel parameter of each buffer.
    pub params: &'a HashMap<BufferId, String>,
    /// Accumulators of earlier stages.
    pub accs: &'a HashMap<AccId, Val>,
    pub frame: &'a Frame,
    /// The dtype of index arithmetic (i32 unless offsets need 64 bits).
    pub index_dtype: DType,
    /// A stored buffer with elements, for [`Body::probe_index`].
    pub probe: Option<BufferId>,
}

/// The emitted values of one stage body.
pub(super) struct Body<'a> {
    s: &'a Scope<'a>,
    block: &'a Block,
    vals: Vec<Option<Val>>,
    /// For each checked (data-dependent) index node: the bool tile of lanes whose
    /// index is inside its axis.
    ok: HashMap<ExprRef, Int>,
    /// Checked index nodes whose value is used as data (by arithmetic, a store, a guard)
    /// and not only in the offsets of accesses, which check it themselves.
    as_data: HashSet<ExprRef>,
}

impl<'a> Body<'a> {
    pub fn new(s: &'a Scope<'a>, block: &'a Block) -> Body<'a> {
        Body {
            s,
            block,
            vals: vec![None; block.nodes.len()],
            ok: HashMap::new(),
            as_data: HashSet::new(),
        }
    }

    /// Emits every node `roots` need, in order.
    pub fn emit(&mut self, b: &mut Builder, roots: &[ExprRef]) -> Result<()> {
        let n = self.block.nodes.len();
        let mut live = vec![false; n];
        for r in roots {
            if let Some(l) = live.get_mut(r.index()) {
                *l = true;
            }
        }
        let mut uses = vec![0usize; n];
        for r in roots {
            if let Some(u) = uses.get_mut(r.index()) {
                *u += 1;
            }
        }
        for i in (0..n).rev() {
            if live[i] {
                self.block.nodes[i].for_each_operand(&mut |r| {
                    if let Some(l) = live.get_mut(r.index()) {
                        *l = true;
                    }
                    if let Some(u) = uses.get_mut(r.index()) {
                        *u += 1;
                    }
                });
            }
        }
        // Where a checked index is data rather than an offset.
        let checked = |r: ExprRef| {
            matches!(
                self.block.get(r).map(|n| &n.op),
                Some(ExprOp::CheckedIndex { .. })
            )
        };
        let mut as_data: HashSet<ExprRef> = roots.iter().copied().filter(|&r| checked(r)).collect();
        for (i, node) in self.block.nodes.iter().enumerate() {
            if !live[i] {
                continue;
            }
            match &node.op {
                ExprOp::Load(l) => {
                    for g in &l.guard {
                        g.expr.for_each_ref(&mut |r| {
                            if checked(r) {
                                as_data.insert(r);
                            }
                        });
                    }
                }
                _ => node.for_each_operand(&mut |r| {
                    if checked(r) {
                        as_data.insert(r);
                    }
                }),
            }
        }
        self.as_data = as_data;
        for i in 0..n {
            if !live[i] {
                continue;
            }
            let r = ExprRef(i as u32);
            let v = self.node(b, r)?;
            let load = matches!(self.block.nodes[i].op, ExprOp::Load(_));
            let v = match v {
                Val::Tile(t) if load || uses[i] > 1 => {
                    let e = b.bind(if load { "x" } else { "t" }, t.e);
                    Val::Tile(TileVal {
                        e,
                        depth: Depth::ZERO,
                        ..t
                    })
                }
                Val::Tile(t) => {
                    let (e, depth) = b.share(t.e, t.depth);
                    Val::Tile(TileVal { e, depth, ..t })
                }
                v => v,
            };
            self.vals[i] = Some(v);
        }
        Ok(())
    }

    /// The value of node `r` (emitted by [`Body::emit`]).
    pub fn val(&self, r: ExprRef) -> Result<Val> {
        self.vals
            .get(r.index())
            .cloned()
            .flatten()
            .ok_or_else(|| Error::internal(format!("{r} was not emitted")))
    }

    /// The loop-IR dtype of node `r`.
    pub fn dtype(&self, r: ExprRef) -> Result<DType> {
        self.block
            .get(r)
            .map(|n| n.dtype)
            .ok_or_else(|| Error::internal(format!("{r} is not a node")))
    }

    fn dynamic(&self, r: ExprRef) -> Option<Int> {
        match self.vals.get(r.index())? {
            // A value read from memory (a gathered index) keeps its buffer's dtype; an
            // index expression is of the kernel's index dtype, so an i64 index read into
            // an i32 kernel (or the reverse) is cast, else the index tile's dtype would
            // not be the one it claims (fuzz finding 0326075d: an i64 index carried as
            // i32 around an argmin loop).
            Some(Val::Tile(t)) if t.dtype != self.s.index_dtype => {
                Some((cast(t.e.clone(), self.s.index_dtype), t.deps))
            }
            Some(Val::Tile(t)) => Some((t.e.clone(), t.deps)),
            Some(Val::Lit(v, _)) => Some((lit(*v), 0)),
            None => None,
        }
    }

    /// The integer tile of a (rewritten) index expression.
    fn int(&self, b: &mut Builder, e: &IndexExpr) -> Result<Int> {
        int_tile(b, self.s.frame, e, &|r| self.dynamic(r))
    }

    fn node(&mut self, b: &mut Builder, r: ExprRef) -> Result<Val> {
        let node = &self.block.nodes[r.index()];
        let d = node.dtype;
        Ok(match &node.op {
            ExprOp::Const(v) => Val::Lit(ferrite_ir::loops::scalar::round_to(*v, d), d),
            ExprOp::Load(l) => self.load(b, l, d)?,
            ExprOp::Acc(a) => self
                .s
                .accs
                .get(a)
                .cloned()
                .ok_or_else(|| Error::internal(format!("{a} is read before it is computed")))?,
            ExprOp::Index(e) => {
                let e = self.s.frame.rewrite(e);
                // A constant index is a literal, so ops on it fold like any constant's (the
                // tile checker rejects `maximum` of two constants).
                if let IndexExpr::Const(c) = e.simplify(&self.s.frame.ext) {
                    return Ok(Val::Lit(Value::Int(c as i128), d));
                }
                let (e, deps) = self.int(b, &e)?;
                Val::Tile(TileVal {
                    e,
                    dtype: self.s.index_dtype,
                    deps,
                    depth: Depth::fixed(1),
                })
            }
            ExprOp::CheckedIndex {
                value,
                extent,
                guard,
            } => self.checked_index(b, r, *value, *extent, guard)?,
            ExprOp::Unary(u, a) => ops::unary(b, *u, &self.val(*a)?, d)?,
            ExprOp::Binary(op, x, y) => {
                let operand = self.dtype(*x)?;
                let (xv, yv) = (self.val(*x)?, self.val(*y)?);
                if *op == BinaryOp::Pow && d.is_int() {
                    self.check_exponent(b, &xv, &yv);
                }
                if op.is_integer_division() && d.is_int() {
                    self.check_divisor(b, *op, &xv, &yv);
                }
                ops::binary(b, *op, &xv, &yv, operand, d)?
            }
            ExprOp::Where(c, x, y) => {
                ops::select(&self.val(*c)?, &self.val(*x)?, &self.val(*y)?, d)
            }
            ExprOp::Cast(x) => ops::convert(&self.val(*x)?, d),
        })
    }

    /// An integer `pow` of a negative exponent is a run-time error on every target,
    /// as in PyTorch: a `check` that the exponent is not negative in every lane
    /// that is on (a literal exponent needs none, or fails wherever `x` is on).
    fn check_exponent(&self, b: &mut Builder, x: &Val, y: &Val) {
        let cond = match y {
            Val::Lit(Value::Int(e), _) if *e >= 0 => return,
            Val::Lit(Value::Bool(_), _) => return,
            Val::Lit(v, _) => ge(lit(*v), int(0)),
            Val::Tile(t) => ge(t.e.clone(), int(0)),
        };
        let mut args = vec![b.bind("nonnegative_exponent", cond)];
        if let Some(m) = self.s.frame.mask(x.deps() | y.deps()) {
            args.push(b.bind("m", m));
        }
        // The comment right above a check is its reason in the error.
        b.comment("integers to negative integer powers are not allowed");
        b.stmt(call(Builtin::Check, args));
    }

    /// An integer division by zero is a run-time error on every target, as in
    /// PyTorch: a `check` that the divisor is not zero in every lane that is on (a
    /// literal divisor needs none, or fails wherever `x` is on).
    fn check_divisor(&self, b: &mut Builder, op: BinaryOp, x: &Val, y: &Val) {
        let cond = match y {
            Val::Lit(v, _) if ferrite_ir::loops::scalar::truth(*v) => return,
            Val::Lit(..) => boolean(false),
            Val::Tile(t) => bin(TBin::Ne, t.e.clone(), int(0)),
        };
        let mut args = vec![b.bind("nonzero_divisor", cond)];
        if let Some(m) = self.s.frame.mask(x.deps() | y.deps()) {
            args.push(b.bind("m", m));
        }
        // The comment right above a check is its reason in the error.
        b.comment(&format!("integer division by zero in {}", op.name()));
        b.stmt(call(Builtin::Check, args));
    }

    /// The conditions of a guard (`lo <= e < hi` each) that can fail, and the axes
    /// they depend on; `None` when one always fails.
    fn guard(
        &self,
        b: &mut Builder,
        guard: &[ferrite_ir::loops::Bound],
    ) -> Result<Option<(Vec<E>, u8)>> {
        let mut conds = Vec::new();
        let mut deps = 0;
        for bound in guard {
            let e = self.s.frame.rewrite(&bound.expr);
            let (lo, hi) = e.range(&self.s.frame.ext).unwrap_or((i64::MIN, i64::MAX));
            if hi < bound.lo || lo >= bound.hi {
                return Ok(None);
            }
            let need_lo = lo < bound.lo;
            let need_hi = hi >= bound.hi;
            if !need_lo && !need_hi {
                continue;
            }
            let (t, dt) = self.int(b, &e)?;
            let t = if need_lo && need_hi {
                b.bind("g", t)
            } else {
                t
            };
            deps |= dt;
            if need_lo {
                conds.push(ge(t.clone(), int(bound.lo)));
            }
            if need_hi {
                conds.push(lt(t, int(bound.hi)));
            }
        }
        Ok(Some((conds, deps)))
    }

    fn checked_index(
        &mut self,
        b: &mut Builder,
        r: ExprRef,
        value: ExprRef,
        extent: u64,
        guard: &[ferrite_ir::loops::Bound],
    ) -> Result<Val> {
        let v = self.val(value)?;
        let Some((conds, gdeps)) = self.guard(b, guard)? else {
            // The guard never holds: the index is never needed.
            return Ok(Val::Lit(Value::Int(0), DType::I64));
        };
        let (ve, vd, vdeps) = match &v {
            Val::Lit(x, d) => (ops::typed_lit(*x, *d), *d, 0),
            // An index of a narrow or unsigned dtype is compared in i64, where the
            // extent fits (a u64 beyond i64::MAX is negative there: out of range too).
            Val::Tile(t) if t.dtype.is_int() && !matches!(t.dtype, DType::I32 | DType::I64) => (
                b.bind("t", cast(t.e.clone(), DType::I64)),
                DType::I64,
                t.deps,
            ),
            Val::Tile(t) => (b.bind("t", t.e.clone()), t.dtype, t.deps),
        };
        if !vd.is_int() {
            return Err(Error::unsupported(format!(
                "a data-dependent index of dtype {vd}"
            )));
        }
        let extent = i64::try_from(extent).unwrap_or(i64::MAX);
        let inside = and(ge(ve.clone(), int(0)), lt(ve.clone(), int(extent)));
        let held = conds.into_iter().reduce(and);
        let (value_e, ok) = match held {
            None => (ve, inside),
            Some(h) => {
                let h = b.bind("g", h);
                (where_(h.clone(), ve, int(0)), or(not(h), inside))
            }
        };
        let deps = vdeps | gdeps;
        let ok = b.bind("ok", ok);
        self.ok.insert(r, (ok.clone(), deps));
        if self.as_data.contains(&r) {
            // No access of this index checks it: read the index again through the check.
            match self.source_load(value) {
                Some(l) => self.probe(b, &l, (ok, deps))?,
                // Computed from no buffer (a constant, an `arange`): read the first
                // element of a stored buffer, at offset -1 where the index is outside.
                None => self.probe_index(b, (ok, deps), guard)?,
            }
        }
        let e = b.bind("idx", value_e);
        Ok(Val::Tile(TileVal {
            e,
            dtype: vd,
            deps,
            depth: Depth::ZERO,
        }))
    }

    /// The first load the value of node `r` is computed from (through its operands).
    fn source_load(&self, r: ExprRef) -> Option<Load> {
        let mut stack = vec![r];
        let mut seen = HashSet::new();
        while let Some(r) = stack.pop() {
            if !seen.insert(r) {
                continue;
            }
            let node = self.block.get(r)?;
            if let ExprOp::Load(l) = &node.op {
                return Some(l.clone());
            }
            node.for_each_operand(&mut |x| stack.push(x));
        }
        None
    }

    /// Reads what `l` reads, with offset -1 on lanes where `ok` (a checked index's flag)
    /// is false, so the simulator stops there with an out-of-bounds error as it does for
    /// an access through that index. For checked indices used as data: `index_select`
    /// of an `arange`, or of an empty axis, reads no buffer through the index.
    fn probe(&mut self, b: &mut Builder, l: &Load, ok: Int) -> Result<()> {
        let Some((conds, gdeps)) = self.guard(b, &l.guard)? else {
            return Ok(());
        };
        let buf = self
            .s
            .params
            .get(&l.buffer)
            .ok_or_else(|| Error::internal(format!("{} is not a parameter", l.buffer)))?;
        let e = self.s.frame.rewrite(&l.index);
        let parts = terms(b, self.s.frame, &e, &|r| self.dynamic(r))?;
        let (sum, ds) = sum_terms(parts);
        let (flag, fdeps) = match self.ok_flags(&l.index) {
            None => ok,
            Some((f, d)) => (and(f, ok.0), d | ok.1),
        };
        let ptr = add(param(buf), where_(flag, sum, int(-1)));
        let pdeps = ds | fdeps;
        let deps = pdeps | gdeps;
        let mut mask = self.s.frame.mask(deps);
        for c in conds {
            mask = Some(match mask {
                None => c,
                Some(m) => and(m, c),
            });
        }
        let mut args = vec![self.widen(ptr, pdeps, deps)];
        if let Some(m) = mask {
            args.push(b.bind("m", m));
        }
        b.bind("probe", call(Builtin::Load, args));
        Ok(())
    }

    /// A load of the first element of the kernel's probe buffer, at offset -1 on lanes
    /// where `ok` is false (and `guard` holds), so that the simulator stops there with an
    /// out-of-bounds error: the check of an index computed from no buffer.
    fn probe_index(
        &mut self,
        b: &mut Builder,
        ok: Int,
        guard: &[ferrite_ir::loops::Bound],
    ) -> Result<()> {
        let Some((conds, gdeps)) = self.guard(b, guard)? else {
            return Ok(());
        };
        let buffer = self.s.probe.ok_or_else(|| {
            Error::internal(
                "a checked index computed from no buffer, in a kernel that stores nothing",
            )
        })?;
        let buf = self
            .s
            .params
            .get(&buffer)
            .ok_or_else(|| Error::internal(format!("{buffer} is not a parameter")))?;
        let (flag, deps) = ok;
        let ptr = add(param(buf), where_(flag, int(0), int(-1)));
        let all = deps | gdeps;
        let mut mask = self.s.frame.mask(all);
        for c in conds {
            mask = Some(match mask {
                None => c,
                Some(m) => and(m, c),
            });
        }
        let mut args = vec![self.widen(ptr, deps, all)];
        if let Some(m) = mask {
            args.push(b.bind("m", m));
        }
        b.bind("probe", call(Builtin::Load, args));
        Ok(())
    }

    /// The checked-index flags an index expression's data-dependent parts need.
    fn ok_flags(&self, e: &IndexExpr) -> Option<Int> {
        let mut out: Option<Int> = None;
        e.for_each_ref(&mut |r| {
            if let Some((f, d)) = self.ok.get(&r) {
                out = Some(match out.take() {
                    None => (f.clone(), *d),
                    Some((g, dg)) => (and(g, f.clone()), dg | d),
                });
            }
        });
        out
    }

    /// The pointer tile `buf + offsets` for an access at `index`, with the axes it
    /// depends on. Offsets of an access with a data-dependent index are -1 where
    /// that index is outside its axis.
    fn pointer(&self, b: &mut Builder, buffer: BufferId, index: &IndexExpr) -> Result<(E, u8)> {
        let buf = self
            .s
            .params
            .get(&buffer)
            .ok_or_else(|| Error::internal(format!("{buffer} is not a parameter")))?;
        let e = self.s.frame.rewrite(index);
        let parts = terms(b, self.s.frame, &e, &|r| self.dynamic(r))?;
        let base = param(buf);
        Ok(match self.ok_flags(index) {
            None => parts
                .into_iter()
                .fold((base, 0), |(p, dp), (t, dt)| (plus(p, t), dp | dt)),
            Some((ok, dok)) => {
                let (sum, ds) = sum_terms(parts);
                (add(base, where_(ok, sum, int(-1))), ds | dok)
            }
        })
    }

    /// `ptr` broadcast to the axes `deps` when it has fewer.
    fn widen(&self, ptr: E, has: u8, deps: u8) -> E {
        if has == deps {
            return ptr;
        }
        let shape = self.s.frame.shape(deps);
        call(Builtin::BroadcastTo, vec![ptr, tuple(&shape)])
    }

    fn load(&mut self, b: &mut Builder, l: &Load, d: DType) -> Result<Val> {
        let Some((conds, gdeps)) = self.guard(b, &l.guard)? else {
            return Ok(Val::Lit(l.other, d));
        };
        let (ptr, pdeps) = self.pointer(b, l.buffer, &l.index)?;
        let deps = pdeps | gdeps;
        let mut mask = self.s.frame.mask(deps);
        let guarded = !conds.is_empty();
        for c in conds {
            mask = Some(match mask {
                None => c,
                Some(m) => and(m, c),
            });
        }
        let ptr = self.widen(ptr, pdeps, deps);
        let mut kwargs = Vec::new();
        let mut args = vec![ptr];
        if let Some(m) = mask {
            args.push(b.bind("m", m));
            if guarded && l.other != Value::zero(d) {
                kwargs.push(("other", lit(l.other)));
            }
        }
        let e = call_kw(Builtin::Load, args, kwargs);
        Ok(Val::Tile(TileVal {
            e,
            dtype: d,
            deps,
            depth: Depth::fixed(1),
        }))
    }

    /// Emits one store of a store stage.
    pub fn store(&self, b: &mut Builder, st: &StoreOp) -> Result<()> {
        let v = self.val(st.value)?;
        let (ve, vdeps) = match &v {
            Val::Lit(x, d) => (ops::lit_as(*x, *d), 0),
            Val::Tile(t) => (t.e.clone(), t.deps),
        };
        let (ptr, pdeps) = self.pointer(b, st.buffer, &st.index)?;
        let deps = pdeps | vdeps;
        let ptr = self.widen(ptr, pdeps, deps);
        let mut args = vec![ptr, ve];
        if let Some(m) = self.s.frame.mask(deps) {
            args.push(b.bind("m", m));
        }
        b.stmt(call(Builtin::Store, args));
        Ok(())
    }
}

/// A tile of `v` with exactly the axes `deps` (broadcast if it has fewer), of
/// dtype `d`.
pub(super) fn broadcast(frame: &Frame, v: &Val, d: DType, deps: u8) -> E {
    let e = ops::typed(v, d);
    if v.deps() == deps {
        return e;
    }
    call(Builtin::BroadcastTo, vec![e, tuple(&frame.shape(deps))])
}
