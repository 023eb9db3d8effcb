//! Global memory: device buffers, where they live, and the SRAM read cache.
//!
//! A buffer lives in LPDDR (the default) or is placed in on-chip SRAM (capacity
//! permitting). Bytes are counted exactly (active lanes times element size) at
//! the level that serves them:
//!
//! - a buffer placed in SRAM is read and written at SRAM;
//! - an LPDDR buffer is written through to LPDDR;
//! - reads of an LPDDR buffer go through the SRAM read cache: within one launch,
//!   a line (`sram_line_bytes`) read for the first time comes from LPDDR and
//!   stays in SRAM; later accesses to it, by any program, read it from SRAM (an
//!   access is decided against the cache as it was when the access started, so
//!   the elements one access fetches all count at LPDDR). Lines are
//!   cached while the SRAM not taken by placed buffers has room; once it is full,
//!   further lines are read from LPDDR every time (no eviction). The cache starts
//!   empty at each launch, since a kernel cannot know what the previous one left.

use super::timing::Traffic;
use super::value::{Elems, Tile};
use ferrite_ir::TensorType;

/// Where a buffer lives.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Placement {
    /// Off-chip LPDDR (reads cached in SRAM within a launch).
    Lpddr,
    /// On-chip SRAM, for the buffer's whole life.
    Sram,
}

/// A buffer in device memory.
#[derive(Clone, Debug)]
pub(crate) struct DeviceBuffer {
    pub name: String,
    pub ty: TensorType,
    pub elems: Elems,
    pub placement: Placement,
}

impl DeviceBuffer {
    pub fn bytes(&self) -> u64 {
        self.ty.size_bytes() as u64
    }
}

/// Which lines of which buffers are in the SRAM read cache.
pub(crate) struct LineCache {
    line: u64,
    capacity: u64,
    used: u64,
    /// One bit per line, per buffer index; allocated on first touch.
    bits: Vec<Vec<u64>>,
}

impl LineCache {
    pub fn new(line_bytes: u64, capacity_bytes: u64, buffers: usize) -> LineCache {
        LineCache {
            line: line_bytes.max(1),
            capacity: capacity_bytes / line_bytes.max(1),
            used: 0,
            bits: vec![Vec::new(); buffers],
        }
    }

    /// True when byte `at` of buffer `buf` (`len` bytes long) is cached.
    fn cached(&mut self, buf: usize, at: u64, len: u64) -> bool {
        let line = at / self.line;
        let Some(bits) = self.bits.get_mut(buf) else {
            return false;
        };
        if bits.is_empty() {
            bits.resize(len.div_ceil(self.line).div_ceil(64) as usize, 0);
        }
        bits.get((line / 64) as usize)
            .is_some_and(|w| w & (1u64 << (line % 64)) != 0)
    }

    /// Brings the line holding byte `at` of buffer `buf` into the cache, if it
    /// has room (call [`Self::cached`] first, which sizes the buffer's bits).
    fn insert(&mut self, buf: usize, at: u64) {
        let line = at / self.line;
        let Some(w) = self
            .bits
            .get_mut(buf)
            .and_then(|bits| bits.get_mut((line / 64) as usize))
        else {
            return;
        };
        let bit = 1u64 << (line % 64);
        if *w & bit == 0 && self.used < self.capacity {
            *w |= bit;
            self.used += 1;
        }
    }
}

/// An unmasked lane outside its buffer.
#[derive(Debug)]
pub(crate) struct OutOfRange {
    pub lane: usize,
    pub offset: i64,
}

/// Gathers `offsets` (lanes where `mask` is false take `other`'s value) from
/// buffer `index`; returns the elements and the bytes read at each level.
pub(crate) fn gather(
    buf: &DeviceBuffer,
    index: usize,
    cache: &mut LineCache,
    offsets: &[i64],
    mask: Option<&[bool]>,
    other: Option<&Tile>,
) -> Result<(Elems, Traffic), OutOfRange> {
    let len = buf.elems.len();
    let size = buf.ty.dtype.size_bytes() as u64;
    let total = buf.bytes();
    let mut traffic = Traffic::default();
    // Hits are decided against the cache as it was when the access started: the
    // lines this access fetches arrive together, at its end.
    let mut fetched: Vec<u64> = Vec::new();
    let mut active = |lane: usize, off: i64| -> Result<Option<usize>, OutOfRange> {
        if mask.is_some_and(|m| !m[lane]) {
            return Ok(None);
        }
        let i = usize::try_from(off).ok().filter(|&i| i < len);
        let Some(i) = i else {
            return Err(OutOfRange { lane, offset: off });
        };
        let at = i as u64 * size;
        let hit = match buf.placement {
            Placement::Sram => true,
            Placement::Lpddr => cache.cached(index, at, total),
        };
        if hit {
            traffic.sram += size;
        } else {
            traffic.lpddr += size;
            fetched.push(at);
        }
        Ok(Some(i))
    };
    fn fill<T: Copy>(
        src: &[T],
        offsets: &[i64],
        other: Option<&[T]>,
        zero: T,
        active: &mut impl FnMut(usize, i64) -> Result<Option<usize>, OutOfRange>,
    ) -> Result<Vec<T>, OutOfRange> {
        let mut out = Vec::with_capacity(offsets.len());
        for (lane, &off) in offsets.iter().enumerate() {
            out.push(match active(lane, off)? {
                Some(i) => src[i],
                None => other.map_or(zero, |o| o[lane]),
            });
        }
        Ok(out)
    }
    let elems = match (&buf.elems, other.map(|t| &t.elems)) {
        (Elems::F(v), Some(Elems::F(o))) => Elems::F(fill(v, offsets, Some(o), 0.0, &mut active)?),
        (Elems::F(v), _) => Elems::F(fill(v, offsets, None, 0.0, &mut active)?),
        (Elems::D(v), Some(Elems::D(o))) => Elems::D(fill(v, offsets, Some(o), 0.0, &mut active)?),
        (Elems::D(v), _) => Elems::D(fill(v, offsets, None, 0.0, &mut active)?),
        (Elems::I(v), Some(Elems::I(o))) => Elems::I(fill(v, offsets, Some(o), 0, &mut active)?),
        (Elems::I(v), _) => Elems::I(fill(v, offsets, None, 0, &mut active)?),
        (Elems::B(v), Some(Elems::B(o))) => {
            Elems::B(fill(v, offsets, Some(o), false, &mut active)?)
        }
        (Elems::B(v), _) => Elems::B(fill(v, offsets, None, false, &mut active)?),
    };
    for at in fetched {
        cache.insert(index, at);
    }
    Ok((elems, traffic))
}

/// Scatters `values` to `offsets` where `mask` is true. Every lane is checked
/// before any is written, so a faulting store writes nothing. Lanes that hit the
/// same element are written in lane order (the last one wins).
pub(crate) fn scatter(
    buf: &mut DeviceBuffer,
    offsets: &[i64],
    mask: Option<&[bool]>,
    values: &Tile,
) -> Result<Traffic, OutOfRange> {
    let converted;
    let values = if values.dtype == buf.ty.dtype {
        values
    } else {
        converted = values.cast(buf.ty.dtype);
        &converted
    };
    let len = buf.elems.len();
    let mut lanes = Vec::with_capacity(offsets.len());
    for (lane, &off) in offsets.iter().enumerate() {
        if mask.is_some_and(|m| !m[lane]) {
            continue;
        }
        match usize::try_from(off).ok().filter(|&i| i < len) {
            Some(i) => lanes.push((lane, i)),
            None => return Err(OutOfRange { lane, offset: off }),
        }
    }
    fn put<T: Copy>(dst: &mut [T], src: &[T], lanes: &[(usize, usize)]) {
        for &(lane, i) in lanes {
            dst[i] = src[lane];
        }
    }
    // After the conversion above both sides have the storage class of the
    // buffer's dtype, so one of the first four arms always applies.
    match (&mut buf.elems, &values.elems) {
        (Elems::F(d), Elems::F(s)) => put(d, s, &lanes),
        (Elems::D(d), Elems::D(s)) => put(d, s, &lanes),
        (Elems::I(d), Elems::I(s)) => put(d, s, &lanes),
        (Elems::B(d), Elems::B(s)) => put(d, s, &lanes),
        _ => {}
    }
    let bytes = lanes.len() as u64 * buf.ty.dtype.size_bytes() as u64;
    Ok(match buf.placement {
        Placement::Sram => Traffic {
            lpddr: 0,
            sram: bytes,
        },
        Placement::Lpddr => Traffic {
            lpddr: bytes,
            sram: 0,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_ir::DType;

    fn buffer(placement: Placement) -> DeviceBuffer {
        DeviceBuffer {
            name: "b".into(),
            ty: TensorType::new(DType::F32, vec![64]).unwrap(),
            elems: Elems::F((0..64).map(|i| i as f32).collect()),
            placement,
        }
    }

    #[test]
    fn rereads_hit_the_sram_cache_until_it_is_full() {
        let b = buffer(Placement::Lpddr);
        // 16-byte lines, room for 2 lines: elements 0..4 and 4..8.
        let mut cache = LineCache::new(16, 32, 1);
        let offs: Vec<i64> = (0..12).collect();
        let (_, t) = gather(&b, 0, &mut cache, &offs, None, None).unwrap();
        assert_eq!(t, Traffic { lpddr: 48, sram: 0 });
        let (e, t) = gather(&b, 0, &mut cache, &offs, None, None).unwrap();
        assert_eq!(
            t,
            Traffic {
                lpddr: 16,
                sram: 32
            }
        );
        assert_eq!(e, Elems::F((0..12).map(|i| i as f32).collect()));
    }

    #[test]
    fn masked_lanes_move_nothing_and_bounds_are_checked() {
        let mut b = buffer(Placement::Sram);
        let mut cache = LineCache::new(64, 0, 1);
        let mask = [true, false];
        let other = Tile {
            dtype: DType::F32,
            shape: vec![2],
            elems: Elems::F(vec![-1.0, -2.0]),
        };
        let (e, t) = gather(&b, 0, &mut cache, &[3, 99], Some(&mask), Some(&other)).unwrap();
        assert_eq!(e, Elems::F(vec![3.0, -2.0]));
        assert_eq!(t, Traffic { lpddr: 0, sram: 4 });
        let err = gather(&b, 0, &mut cache, &[3, -1], None, None).unwrap_err();
        assert_eq!((err.lane, err.offset), (1, -1));
        let nines = Tile {
            dtype: DType::F32,
            shape: vec![2],
            elems: Elems::F(vec![9.0, 9.0]),
        };
        let err = scatter(&mut b, &[0, 64], None, &nines).unwrap_err();
        assert_eq!((err.lane, err.offset), (1, 64));
        assert_eq!(
            b.elems,
            buffer(Placement::Sram).elems,
            "a faulting store writes nothing"
        );
        let pair = Tile {
            dtype: DType::F32,
            shape: vec![2],
            elems: Elems::F(vec![1.0, 2.0]),
        };
        scatter(&mut b, &[5, 5], None, &pair).unwrap();
        let Elems::F(v) = &b.elems else { panic!() };
        assert_eq!(v[5], 2.0);
    }
}
