//! Mutations of protobuf messages at the wire level, for fuzzing the ONNX importer: a
//! message is read without its schema into a tree of fields (a length-delimited field that
//! reads as a message is kept as one), one field of the tree is changed, and the tree is
//! written back, sometimes with a length that lies. Because the mutations work on fields,
//! not bytes, most mutants still decode: they reach the importer with dims, data sizes,
//! attribute values, data types, names and node order changed, not just the decoder.

use ferrite_ir::SplitMix64;

/// A uniform draw below `n` (0 when `n` is 0).
trait Below {
    fn below(&mut self, n: usize) -> usize;
}

impl Below for SplitMix64 {
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One field of a message: its number and its value.
#[derive(Clone, Debug, PartialEq)]
pub struct Field {
    /// The field number.
    pub number: u32,
    /// The value, by wire type.
    pub value: Value,
}

/// A field's value, by wire type.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1.
    Fixed64(u64),
    /// Wire type 5.
    Fixed32(u32),
    /// Wire type 2 that does not read as a message (strings, packed data, raw bytes).
    Bytes(Vec<u8>),
    /// Wire type 2 that reads as a message.
    Message(Vec<Field>),
}

/// Nested messages deeper than this are kept as bytes.
const MAX_DEPTH: usize = 12;

fn read_varint(b: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..70).step_by(7) {
        let byte = *b.get(*pos)?;
        *pos += 1;
        if shift == 63 && byte > 1 {
            return None;
        }
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Reads `bytes` as a message; `None` when they are not one.
pub fn decode(bytes: &[u8]) -> Option<Vec<Field>> {
    decode_at(bytes, 0)
}

fn decode_at(b: &[u8], depth: usize) -> Option<Vec<Field>> {
    let mut pos = 0;
    let mut fields = Vec::new();
    while pos < b.len() {
        let key = read_varint(b, &mut pos)?;
        let number = u32::try_from(key >> 3).ok().filter(|&n| n > 0)?;
        let value = match key & 7 {
            0 => Value::Varint(read_varint(b, &mut pos)?),
            1 => {
                let v = b.get(pos..pos + 8)?;
                pos += 8;
                Value::Fixed64(u64::from_le_bytes(v.try_into().ok()?))
            }
            5 => {
                let v = b.get(pos..pos + 4)?;
                pos += 4;
                Value::Fixed32(u32::from_le_bytes(v.try_into().ok()?))
            }
            2 => {
                let len = usize::try_from(read_varint(b, &mut pos)?).ok()?;
                let body = b.get(pos..pos.checked_add(len)?)?;
                pos += len;
                // A plausible message: it reads to the end with small field numbers.
                match (depth < MAX_DEPTH && !body.is_empty())
                    .then(|| decode_at(body, depth + 1))
                    .flatten()
                    .filter(|f| f.iter().all(|f| f.number < 64))
                {
                    Some(m) => Value::Message(m),
                    None => Value::Bytes(body.to_vec()),
                }
            }
            _ => return None,
        };
        fields.push(Field { number, value });
    }
    Some(fields)
}

fn write_varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Writes `fields` as a message.
pub fn encode(fields: &[Field]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(fields, &mut None, &mut out);
    out
}

/// `lie`: when `Some((n, delta))`, the `n`-th length written (counting down) is off by `delta`.
fn encode_into(fields: &[Field], lie: &mut Option<(usize, i64)>, out: &mut Vec<u8>) {
    for f in fields {
        let wire = match f.value {
            Value::Varint(_) => 0,
            Value::Fixed64(_) => 1,
            Value::Fixed32(_) => 5,
            Value::Bytes(_) | Value::Message(_) => 2,
        };
        write_varint(u64::from(f.number) << 3 | wire, out);
        match &f.value {
            Value::Varint(v) => write_varint(*v, out),
            Value::Fixed64(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::Fixed32(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::Bytes(b) => {
                write_len(b.len(), lie, out);
                out.extend_from_slice(b);
            }
            Value::Message(m) => {
                let mut body = Vec::new();
                encode_into(m, lie, &mut body);
                write_len(body.len(), lie, out);
                out.extend_from_slice(&body);
            }
        }
    }
}

fn write_len(len: usize, lie: &mut Option<(usize, i64)>, out: &mut Vec<u8>) {
    let mut v = len as u64;
    if let Some((n, delta)) = lie {
        if *n == 0 {
            v = v.wrapping_add(*delta as u64);
            *lie = None;
        } else {
            *n -= 1;
        }
    }
    write_varint(v, out);
}

/// Integers worth trying in a varint: zero, one, negatives (as protobuf writes an `int64`),
/// the edges of every integer width, and sizes that overflow when multiplied.
const VARINTS: &[i64] = &[
    0,
    1,
    2,
    3,
    7,
    -1,
    -2,
    16,
    255,
    256,
    65535,
    1 << 16,
    1 << 20,
    1 << 24,
    (1 << 31) - 1,
    1 << 31,
    (1 << 32) - 1,
    1 << 32,
    1 << 40,
    1 << 62,
    i64::MAX,
    i64::MIN,
];

/// Floats worth trying in a fixed32 or fixed64 (attribute values, float data).
const FLOATS: &[f64] = &[
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    1e-45,
    3.4e38,
    1e39,
    -1e300,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::NAN,
    65504.0,
    2147483648.0,
];

/// Strings worth putting in a bytes field: ONNX op types, attribute names, data-type-like
/// words, and the empty string.
const STRINGS: &[&str] = &[
    "",
    "Add",
    "Relu",
    "MatMul",
    "Gemm",
    "Reshape",
    "Transpose",
    "Gather",
    "GatherElements",
    "Concat",
    "Slice",
    "Pad",
    "Expand",
    "Cast",
    "Where",
    "Softmax",
    "ReduceSum",
    "ReduceMean",
    "Split",
    "Squeeze",
    "Unsqueeze",
    "Shape",
    "ConstantOfShape",
    "Range",
    "Constant",
    "Tile",
    "Einsum",
    "Pow",
    "Div",
    "Mod",
    "Flatten",
    "Trilu",
    "Clip",
    "BatchNormalization",
    "axis",
    "axes",
    "perm",
    "to",
    "value",
    "keepdims",
    "mode",
    "x",
    "y",
    "com.microsoft",
];

/// The number of fields in the tree (every field, nested ones too).
fn count(fields: &[Field]) -> usize {
    fields
        .iter()
        .map(|f| {
            1 + match &f.value {
                Value::Message(m) => count(m),
                _ => 0,
            }
        })
        .sum()
}

/// Applies one mutation to the `k`-th field (pre-order) of the tree. Returns true when it
/// found it.
fn mutate_at(fields: &mut Vec<Field>, k: &mut usize, rng: &mut SplitMix64) -> bool {
    for i in 0..fields.len() {
        if *k == 0 {
            mutate_field(fields, i, rng);
            return true;
        }
        *k -= 1;
        if let Value::Message(m) = &mut fields[i].value {
            if mutate_at(m, k, rng) {
                return true;
            }
        }
    }
    false
}

fn mutate_field(fields: &mut Vec<Field>, i: usize, rng: &mut SplitMix64) {
    match rng.below(10) {
        // Remove it (an input, a dim, an attribute, a node).
        0 => {
            fields.remove(i);
            return;
        }
        // Repeat it somewhere among its siblings.
        1 => {
            let at = rng.below(fields.len() + 1);
            let copy = fields[i].clone();
            fields.insert(at, copy);
            return;
        }
        // Swap it with a sibling of the same number (node order, input order, dims).
        2 => {
            let same: Vec<usize> = (0..fields.len())
                .filter(|&j| fields[j].number == fields[i].number)
                .collect();
            let j = same[rng.below(same.len())];
            fields.swap(i, j);
            return;
        }
        // Give it another field number.
        3 if rng.below(4) == 0 => {
            fields[i].number = 1 + rng.below(25) as u32;
            return;
        }
        _ => {}
    }
    let f = &mut fields[i];
    match &mut f.value {
        Value::Varint(v) => {
            *v = match rng.below(4) {
                0 => v.wrapping_add(1),
                1 => v.wrapping_sub(1),
                2 => v.wrapping_shl(1 + rng.below(40) as u32),
                _ => VARINTS[rng.below(VARINTS.len())] as u64,
            }
        }
        Value::Fixed32(v) => {
            *v = match rng.below(3) {
                0 => *v ^ (1 << rng.below(32)),
                1 => rng.next() as u32,
                _ => (FLOATS[rng.below(FLOATS.len())] as f32).to_bits(),
            }
        }
        Value::Fixed64(v) => {
            *v = match rng.below(3) {
                0 => *v ^ (1 << rng.below(64)),
                1 => VARINTS[rng.below(VARINTS.len())] as u64,
                _ => FLOATS[rng.below(FLOATS.len())].to_bits(),
            }
        }
        Value::Bytes(b) => match rng.below(6) {
            0 => b.truncate(rng.below(b.len() + 1)),
            1 if !b.is_empty() => {
                let at = rng.below(b.len());
                b[at] ^= 1 << rng.below(8);
            }
            2 => {
                let n = 1 + rng.below(64);
                b.extend((0..n).map(|_| rng.next() as u8));
            }
            3 if !b.is_empty() => {
                let copy = b.clone();
                for _ in 0..rng.below(8) {
                    b.extend_from_slice(&copy);
                }
            }
            _ => *b = STRINGS[rng.below(STRINGS.len())].as_bytes().to_vec(),
        },
        Value::Message(m) => match rng.below(3) {
            // Shuffle its fields.
            0 => {
                for j in (1..m.len()).rev() {
                    let r = rng.below(j + 1);
                    m.swap(j, r);
                }
            }
            1 => m.clear(),
            _ => f.value = Value::Bytes(encode(m)[..].to_vec()),
        },
    }
}

/// A mutant of the protobuf message `seed`: one to four field mutations, then, now and
/// then, a length that lies or a truncation. Bytes that are not a message get a byte-level
/// truncation and flip only.
pub fn mutate(seed: &[u8], rng: &mut SplitMix64) -> Vec<u8> {
    let Some(mut tree) = decode(seed) else {
        let mut out = seed.to_vec();
        if !out.is_empty() {
            let at = rng.below(out.len());
            out[at] ^= 1 << rng.below(8);
        }
        return out;
    };
    for _ in 0..1 + rng.below(4) {
        let n = count(&tree);
        if n == 0 {
            break;
        }
        let mut k = rng.below(n);
        mutate_at(&mut tree, &mut k, rng);
    }
    let mut out = Vec::new();
    let mut lie = (rng.below(8) == 0).then(|| {
        let delta = [-1i64, 1, -8, 64, 1 << 20, i64::MAX][rng.below(6)];
        (rng.below(count(&tree) + 1), delta)
    });
    encode_into(&tree, &mut lie, &mut out);
    if rng.below(16) == 0 {
        out.truncate(rng.below(out.len() + 1));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_reads_and_writes_back_unchanged() {
        // Field 1 varint 150, field 2 a nested message {1: "hi"}, field 3 fixed32.
        let bytes = [
            0x08, 0x96, 0x01, 0x12, 0x04, 0x0a, 0x02, b'h', b'i', 0x1d, 1, 2, 3, 4,
        ];
        let tree = decode(&bytes).unwrap();
        assert_eq!(tree.len(), 3);
        assert!(matches!(tree[1].value, Value::Message(_)));
        assert_eq!(encode(&tree), bytes);
    }

    #[test]
    fn mutants_differ_from_their_seed() {
        let bytes = [0x08, 0x96, 0x01, 0x12, 0x04, 0x0a, 0x02, b'h', b'i'];
        let mut rng = SplitMix64(7);
        let changed = (0..100)
            .filter(|_| mutate(&bytes, &mut rng) != bytes)
            .count();
        assert!(changed > 50, "{changed}");
    }
}
