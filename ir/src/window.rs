//! The geometry of sliding windows over the spatial axes of an `[N, C, *spatial]`
//! tensor: what `conv`, `conv_transpose`, `max_pool` and `avg_pool` share.
//!
//! An op's `stride`, `padding` and `dilation` attributes are resolved here, once,
//! into one [`Axis`] per spatial axis; the typing rule ([`crate::infer`]), the
//! reference interpreter and `decompose` all read the same numbers, so they cannot
//! disagree on an output extent or on which input element a tap reads.
//!
//! Output extents follow PyTorch:
//! `(in + pad_begin + pad_end - dilation * (kernel - 1) - 1) / stride + 1`, rounded
//! down, or up with `ceil_mode`, in which case a last window that would start in the
//! end padding is dropped (PyTorch's and ONNX's rule).

use crate::types::MAX_ELEMENTS;
use crate::TypeError;

/// The most spatial axes a window op has (`conv3d`, `max_pool3d`).
pub const MAX_SPATIAL: usize = 3;

/// The most taps a window may have (the product of its kernel extents): `decompose`
/// makes one slice per tap, so this bounds the graph it builds. A 256x256 window fits.
pub const MAX_TAPS: usize = 1 << 16;

/// One spatial axis of a window op, resolved.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Axis {
    /// The input's extent on this axis.
    pub input: usize,
    /// Taps of the kernel.
    pub kernel: usize,
    /// Distance between the starts of neighbouring windows.
    pub stride: usize,
    /// Distance between neighbouring taps of one window.
    pub dilation: usize,
    /// Implicit padding before the first element.
    pub pad_begin: usize,
    /// Implicit padding after the last element.
    pub pad_end: usize,
    /// The output's extent on this axis.
    pub output: usize,
}

impl Axis {
    /// The input position that tap `k` of window `o` reads, counted from the first
    /// element of the unpadded input (negative or past the end inside the padding).
    pub fn position(&self, o: usize, k: usize) -> i64 {
        (o * self.stride + k * self.dilation) as i64 - self.pad_begin as i64
    }

    /// The extent the padded input needs so that every tap of every window is inside
    /// it: larger than `pad_begin + input + pad_end` only with `ceil_mode`.
    pub fn padded_extent(&self) -> usize {
        let needed = match self.output {
            0 => 0,
            o => (o - 1) * self.stride + (self.kernel - 1) * self.dilation + 1,
        };
        needed.max(self.pad_begin + self.input + self.pad_end)
    }
}

/// The window attributes of one op, as written (`None`: the default).
#[derive(Clone, Copy, Debug)]
pub struct Attrs<'a> {
    /// The op's name, for messages.
    pub op: &'static str,
    /// `stride=[..]`, one per axis (default: 1, or the kernel for pooling).
    pub stride: Option<&'a [i64]>,
    /// `padding=[..]`: one per axis (both sides), or begins then ends (default 0).
    pub padding: Option<&'a [i64]>,
    /// `dilation=[..]`, one per axis (default 1).
    pub dilation: Option<&'a [i64]>,
    /// Round output extents up.
    pub ceil_mode: bool,
    /// Pooling: the stride defaults to the kernel.
    pub stride_is_kernel: bool,
}

/// Resolves the windows of an op over spatial extents `input` with kernel extents
/// `kernel` (already checked positive). Errors name the attribute at fault.
pub fn resolve(attrs: &Attrs, input: &[usize], kernel: &[usize]) -> Result<Vec<Axis>, TypeError> {
    let s = input.len();
    let op = attrs.op;
    let list = |name: &'static str,
                v: Option<&[i64]>,
                min: i64,
                lens: &[usize]|
     -> Result<Option<Vec<usize>>, TypeError> {
        let Some(v) = v else { return Ok(None) };
        if !lens.contains(&v.len()) {
            let want = match lens {
                [a] => format!("{a}"),
                [a, b] => format!("{a} or {b}"),
                _ => format!("{lens:?}"),
            };
            return Err(TypeError::new(format!(
                "{op}: {name} has {} entries, the input has {s} spatial axes (want {want})",
                v.len()
            ))
            .on(name));
        }
        if let Some(&bad) = v.iter().find(|&&x| x < min || x > MAX_ELEMENTS as i64) {
            return Err(TypeError::new(format!(
                "{op}: {name} entries must be in {min}..={MAX_ELEMENTS}, not {bad}"
            ))
            .on(name));
        }
        Ok(Some(v.iter().map(|&x| x as usize).collect()))
    };
    let taps = kernel.iter().try_fold(1usize, |n, &k| n.checked_mul(k));
    if taps.is_none_or(|t| t > MAX_TAPS) {
        return Err(TypeError::new(format!(
            "{op}: a kernel of {kernel:?} has more than {MAX_TAPS} taps"
        ))
        .on("kernel"));
    }
    let stride = list("stride", attrs.stride, 1, &[s])?;
    let padding = list("padding", attrs.padding, 0, &[s, 2 * s])?;
    let dilation = list("dilation", attrs.dilation, 1, &[s])?;
    let mut axes = Vec::with_capacity(s);
    for i in 0..s {
        let (pad_begin, pad_end) = match &padding {
            None => (0, 0),
            Some(p) if p.len() == s => (p[i], p[i]),
            Some(p) => (p[i], p[s + i]),
        };
        let stride = match &stride {
            Some(v) => v[i],
            None if attrs.stride_is_kernel => kernel[i],
            None => 1,
        };
        let dilation = dilation.as_ref().map_or(1, |v| v[i]);
        // Every term is below 2^31, so these products fit comfortably in i128.
        let span = (dilation as i128) * (kernel[i] as i128 - 1) + 1;
        let padded = input[i] as i128 + pad_begin as i128 + pad_end as i128;
        if span > padded {
            return Err(TypeError::new(format!(
                "{op}: the window spans {span} elements on spatial axis {i}, more than the \
                 {padded} of the padded input"
            ))
            .on(if attrs.dilation.is_some() {
                "dilation"
            } else if padding.is_some() {
                "padding"
            } else {
                "kernel"
            }));
        }
        let room = padded - span;
        let st = stride as i128;
        let mut output = if attrs.ceil_mode {
            (room + st - 1) / st + 1
        } else {
            room / st + 1
        };
        if attrs.ceil_mode && (output - 1) * st >= input[i] as i128 + pad_begin as i128 {
            output -= 1;
        }
        axes.push(Axis {
            input: input[i],
            kernel: kernel[i],
            stride,
            dilation,
            pad_begin,
            pad_end,
            output: output as usize,
        });
    }
    Ok(axes)
}

/// Checks a kernel extent list (`kernel=[..]` of a pooling op, or a weight's spatial
/// extents): one positive extent per spatial axis.
pub fn kernel(op: &'static str, kernel: &[i64], spatial: usize) -> Result<Vec<usize>, TypeError> {
    if kernel.len() != spatial {
        return Err(TypeError::new(format!(
            "{op}: kernel has {} entries, the input has {spatial} spatial axes",
            kernel.len()
        ))
        .on("kernel"));
    }
    if let Some(&bad) = kernel.iter().find(|&&k| k < 1 || k > MAX_ELEMENTS as i64) {
        return Err(
            TypeError::new(format!("{op}: kernel extents must be positive, not {bad}"))
                .on("kernel"),
        );
    }
    Ok(kernel.iter().map(|&k| k as usize).collect())
}

/// The spatial extents of `shape`, an `[N, C, *spatial]` operand of `op` with 1 to
/// [`MAX_SPATIAL`] spatial axes.
pub fn spatial<'a>(op: &str, what: &str, shape: &'a [usize]) -> Result<&'a [usize], TypeError> {
    if !(3..=2 + MAX_SPATIAL).contains(&shape.len()) {
        return Err(TypeError::new(format!(
            "{op}: the {what} must be [N, C, *spatial] with 1 to {MAX_SPATIAL} spatial axes, \
             not rank {}",
            shape.len()
        )));
    }
    Ok(&shape[2..])
}

/// The divisor of `avg_pool` at output position `o`: the number of its taps inside the
/// input, or (`count_include_pad`) inside the input and its explicit padding.
pub fn divisor(axes: &[Axis], o: &[usize], count_include_pad: bool) -> usize {
    axes.iter()
        .zip(o)
        .map(|(ax, &oi)| {
            let (lo, hi) = if count_include_pad {
                (-(ax.pad_begin as i64), (ax.input + ax.pad_end) as i64)
            } else {
                (0, ax.input as i64)
            };
            (0..ax.kernel)
                .filter(|&k| (lo..hi).contains(&ax.position(oi, k)))
                .count()
        })
        .product()
}

/// The row-major multi-index of flat position `flat` in a tensor of extents `dims` (a
/// window's tap or an output position, one coordinate per spatial axis).
pub fn unravel(mut flat: usize, dims: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; dims.len()];
    for i in (0..dims.len()).rev() {
        idx[i] = flat % dims[i];
        flat /= dims[i];
    }
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(op: &'static str) -> Attrs<'static> {
        Attrs {
            op,
            stride: None,
            padding: None,
            dilation: None,
            ceil_mode: false,
            stride_is_kernel: false,
        }
    }

    #[test]
    fn output_extents_follow_pytorch() {
        let a = Attrs {
            stride: Some(&[2, 2]),
            padding: Some(&[1, 1]),
            ..attrs("conv")
        };
        let w = resolve(&a, &[7, 8], &[3, 3]).unwrap();
        assert_eq!((w[0].output, w[1].output), (4, 4));
        // Asymmetric padding: begins, then ends.
        let a = Attrs {
            padding: Some(&[0, 1, 2, 0]),
            ..attrs("conv")
        };
        let w = resolve(&a, &[5, 5], &[3, 3]).unwrap();
        assert_eq!((w[0].pad_begin, w[0].pad_end, w[0].output), (0, 2, 5));
        assert_eq!((w[1].pad_begin, w[1].pad_end, w[1].output), (1, 0, 4));
        // ceil_mode keeps a partial last window, unless it starts in the padding.
        let a = Attrs {
            ceil_mode: true,
            stride_is_kernel: true,
            ..attrs("max_pool")
        };
        let w = resolve(&a, &[5], &[2]).unwrap();
        assert_eq!((w[0].output, w[0].padded_extent()), (3, 6));
        let a = Attrs {
            stride: Some(&[2]),
            padding: Some(&[1]),
            ceil_mode: true,
            ..attrs("max_pool")
        };
        // (5 + 2 - 2) / 2 rounds up to 3, + 1 = 4; the fourth window would start at 6,
        // in the end padding, so it is dropped.
        let w = resolve(&a, &[5], &[2]).unwrap();
        assert_eq!(w[0].output, 3);
        let w = resolve(&a, &[4], &[3]).unwrap();
        assert_eq!(w[0].output, 3);
    }

    #[test]
    fn bad_attributes_are_named() {
        let a = Attrs {
            stride: Some(&[0, 1]),
            ..attrs("conv")
        };
        assert_eq!(
            resolve(&a, &[4, 4], &[1, 1]).unwrap_err().attribute,
            Some("stride")
        );
        let a = Attrs {
            padding: Some(&[1, 1, 1]),
            ..attrs("conv")
        };
        assert_eq!(
            resolve(&a, &[4, 4], &[1, 1]).unwrap_err().attribute,
            Some("padding")
        );
        let a = Attrs {
            dilation: Some(&[3]),
            ..attrs("conv")
        };
        let e = resolve(&a, &[4], &[3]).unwrap_err();
        assert_eq!(e.attribute, Some("dilation"));
        assert!(e.message.contains("spans 7 elements"), "{}", e.message);
        let a = Attrs {
            padding: Some(&[i64::MAX]),
            ..attrs("conv")
        };
        assert_eq!(
            resolve(&a, &[4], &[3]).unwrap_err().attribute,
            Some("padding")
        );
        assert_eq!(
            kernel("max_pool", &[2, 0], 2).unwrap_err().attribute,
            Some("kernel")
        );
    }
}
