//! Multi-head scaled-dot-product attention as one tile kernel whose batch and
//! sequence length are launch arguments: the attention step between the row
//! programs of a transformer compiled once for every binding (the sim path of
//! `ferrite::Dynamic`).
//!
//! Same semantics and layout as the CPU's `ferrite_cpu::attention`: q, k, v and
//! the output are *token rows*, `batch * seq` rows of `heads * head_dim` (q),
//! `kv_heads * head_dim` (k), `kv_heads * value_dim` (v) and `heads * value_dim`
//! (out) elements, token `t` of sequence `b` at row `b * seq + t`; query head `h`
//! reads key/value head `h / (heads / kv_heads)`; the scores are `q . k * scale`,
//! causal attention keeps key `j <= i` for query `i`, and a softmax over the keys
//! weighs the values.
//!
//! The kernel is the flash-attention loop: program `(i, bh)` owns the queries
//! `[i * BM, (i + 1) * BM)` of head `bh % heads` of sequence `bh / heads`, holds
//! them as a `[BM, D]` tile, and walks the keys in blocks of `BN` (up to the end
//! of its query block when causal), keeping each query's running maximum, its
//! sum of exponentials and the weighted sum of values, rescaled as the maximum
//! grows. The scores never go to memory. The grid `[ceil(seq / BM), batch *
//! heads, 1]` and the masks (`rm < seq`, `rn < seq`) come from the arguments, so
//! one kernel runs every batch and length.
//!
//! ```
//! use ferrite_accel::attention::{AttentionKernel, AttentionSpec};
//! use ferrite_accel::sim::{Device, Machine, Placement};
//! use ferrite_ir::Tensor;
//! let spec = AttentionSpec { heads: 2, kv_heads: 1, head_dim: 8, value_dim: 8, causal: true, scale: 0.35 };
//! let kernel = AttentionKernel::new(&spec).unwrap();
//! let (batch, seq) = (2, 5);
//! let mut dev = Device::new(Machine::mtia2i());
//! let rows = |w: usize, seed: u64| {
//!     let v: Vec<f32> = (0..batch * seq * w).map(|i| ((i as u64 * 7 + seed) % 11) as f32 / 11.0).collect();
//!     Tensor::from_f32(&[batch * seq, w], v).unwrap()
//! };
//! let q = dev.upload("q", &rows(16, 1), Placement::Lpddr).unwrap();
//! let k = dev.upload("k", &rows(8, 2), Placement::Lpddr).unwrap();
//! let v = dev.upload("v", &rows(8, 3), Placement::Lpddr).unwrap();
//! let out = dev.alloc("out", &rows(16, 0).ty, Placement::Lpddr).unwrap();
//! kernel.launch(&mut dev, batch, seq, [q, k, v, out]).unwrap();
//! // The first token of a causal sequence attends to itself alone: its value row.
//! let o = dev.read(out).unwrap().to_f64();
//! let vs = rows(8, 3).to_f64();
//! for d in 0..8 {
//!     assert!((o[d] - vs[d]).abs() < 1e-6 && (o[8 + d] - vs[d]).abs() < 1e-6);
//! }
//! ```

use crate::error::{Error, Result};
use crate::sim::{self, Device, DeviceArg, SimReport};
use crate::tile::{self, CheckedKernel};

/// What an attention kernel computes, apart from the batch and the length.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionSpec {
    /// Query heads.
    pub heads: usize,
    /// Key and value heads; it divides `heads` (grouped-query attention).
    pub kv_heads: usize,
    /// Elements per head of q and k.
    pub head_dim: usize,
    /// Elements per head of v and of the output.
    pub value_dim: usize,
    /// Key `j` is seen by query `i` only when `j <= i`.
    pub causal: bool,
    /// The scores' factor.
    pub scale: f64,
}

/// Queries per program.
const BLOCK_M: usize = 32;
/// Keys per step of a program's loop.
const BLOCK_N: usize = 32;
/// The most elements a launch's token rows may have: offsets are 32-bit.
const MAX_ELEMENTS: usize = 1 << 30;

/// An attention kernel for one [`AttentionSpec`], run at any batch and length.
#[derive(Clone, Debug)]
pub struct AttentionKernel {
    spec: AttentionSpec,
    text: String,
    kernel: CheckedKernel,
}

impl AttentionKernel {
    /// Generates and checks the kernel of `spec`.
    pub fn new(spec: &AttentionSpec) -> Result<AttentionKernel> {
        let s = spec;
        if s.heads == 0 || s.kv_heads == 0 || !s.heads.is_multiple_of(s.kv_heads) {
            return Err(Error::unsupported(format!(
                "attention of {} query heads over {} key/value heads",
                s.heads, s.kv_heads
            )));
        }
        if s.head_dim == 0 || s.value_dim == 0 || !s.scale.is_finite() {
            return Err(Error::unsupported(format!(
                "attention with heads of {} and {} elements scaled by {}",
                s.head_dim, s.value_dim, s.scale
            )));
        }
        let text = source(s);
        let kernel = tile::parse_and_check("attention.tile", &text)
            .map_err(|e| Error::internal(format!("the attention kernel does not check: {e}")))?;
        Ok(AttentionKernel {
            spec: spec.clone(),
            text,
            kernel,
        })
    }

    /// What it computes.
    pub fn spec(&self) -> &AttentionSpec {
        &self.spec
    }

    /// The kernel's text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The launch grid for `batch` sequences of `seq` tokens.
    pub fn grid(&self, batch: usize, seq: usize) -> [usize; 3] {
        [seq.div_ceil(BLOCK_M), batch * self.spec.heads, 1]
    }

    /// Runs the kernel on `dev` for `batch` sequences of `seq` tokens, over the
    /// token rows `[q, k, v, out]` (see the [module docs](self)); returns the
    /// launch's report. Nothing runs when there are no tokens.
    pub fn launch(
        &self,
        dev: &mut Device,
        batch: usize,
        seq: usize,
        [q, k, v, out]: [sim::BufferId; 4],
    ) -> Result<Option<SimReport>> {
        let s = &self.spec;
        let tokens = batch * seq;
        if tokens == 0 {
            return Ok(None);
        }
        let widest = (s.heads.max(s.kv_heads)) * s.head_dim.max(s.value_dim);
        if tokens.saturating_mul(widest) >= MAX_ELEMENTS || seq > i32::MAX as usize {
            return Err(Error::unsupported(format!(
                "attention over {tokens} tokens of {widest} elements: offsets past 32 bits"
            )));
        }
        let args = [
            DeviceArg::Buffer(q),
            DeviceArg::Buffer(k),
            DeviceArg::Buffer(v),
            DeviceArg::Buffer(out),
            DeviceArg::Int(seq as i64),
        ];
        Ok(Some(dev.launch(
            &self.kernel,
            self.grid(batch, seq),
            &args,
        )?))
    }
}

/// The kernel's text for `s`.
fn source(s: &AttentionSpec) -> String {
    let (h, d, dv) = (s.heads, s.head_dim, s.value_dim);
    let group = s.heads / s.kv_heads;
    let (qs, ks, vs, os) = (h * d, s.kv_heads * d, s.kv_heads * dv, h * dv);
    let dp = d.next_power_of_two();
    let dvp = dv.next_power_of_two();
    // Masks of the padding lanes of a head that is not a power of two wide.
    let d_col = if dp == d {
        String::new()
    } else {
        format!(" & (rd[None, :] < {d})")
    };
    let d_row = if dp == d {
        String::new()
    } else {
        format!(" & (rd[:, None] < {d})")
    };
    let dv_col = if dvp == dv {
        String::new()
    } else {
        format!(" & (rv[None, :] < {dv})")
    };
    let scale = s.scale as f32 as f64;
    let (hi, visible) = if s.causal {
        (
            "minimum(seq, (pid + 1) * BM)",
            "mn[None, :] & (rn[None, :] <= rm[:, None])",
        )
    } else {
        ("seq", "mn[None, :]")
    };
    format!(
        "# attention: {h} heads of {d} (values {dv}) over {} key/value heads, {}scaled by {scale:?};\n\
         # token rows [batch * seq, heads * dim]; grid [ceil(seq / BM), batch * {h}, 1]\n\
         kernel attention(q: *f32, k: *f32, v: *f32, out: *f32, seq: i32) {{\n\
         \x20 const BM = {BLOCK_M}\n\
         \x20 const BN = {BLOCK_N}\n\
         \x20 const DP = {dp}\n\
         \x20 const DVP = {dvp}\n\
         \x20 pid = program_id(0)\n\
         \x20 bh = program_id(1)\n\
         \x20 h = bh % {h}\n\
         \x20 kh = h / {group}\n\
         \x20 tok0 = bh / {h} * seq\n\
         \x20 rm = pid * BM + arange(0, BM)\n\
         \x20 mm = rm < seq\n\
         \x20 rd = arange(0, DP)\n\
         \x20 rv = arange(0, DVP)\n\
         \x20 qt = load(q + (tok0 + rm)[:, None] * {qs} + h * {d} + rd[None, :], mm[:, None]{d_col})\n\
         \x20 m_i = full(BM, -inf)\n\
         \x20 l_i = zeros(BM)\n\
         \x20 acc = zeros((BM, DVP))\n\
         \x20 for n0 in range(0, {hi}, BN) {{\n\
         \x20   rn = n0 + arange(0, BN)\n\
         \x20   mn = rn < seq\n\
         \x20   kt = load(k + (tok0 + rn)[None, :] * {ks} + kh * {d} + rd[:, None], mn[None, :]{d_row})\n\
         \x20   s = where({visible}, dot(qt, kt) * {scale:?}, -inf)\n\
         \x20   m_new = maximum(m_i, max(s, 1))\n\
         \x20   alpha = exp(m_i - m_new)\n\
         \x20   p = exp(s - m_new[:, None])\n\
         \x20   l_i = l_i * alpha + sum(p, 1)\n\
         \x20   vt = load(v + (tok0 + rn)[:, None] * {vs} + kh * {dv} + rv[None, :], mn[:, None]{dv_col})\n\
         \x20   acc = acc * alpha[:, None] + dot(p, vt)\n\
         \x20   m_i = m_new\n\
         \x20 }}\n\
         \x20 store(out + (tok0 + rm)[:, None] * {os} + h * {dv} + rv[None, :], acc / l_i[:, None], mm[:, None]{dv_col})\n\
         }}\n",
        s.kv_heads,
        if s.causal { "causal, " } else { "" },
    )
}
