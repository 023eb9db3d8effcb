//! The machine model: the figures of an accelerator, read from a preset file.
//!
//! The default, [`Machine::mtia2i`], is the MTIA-2i-like chip of
//! `runtime/accel/presets/mtia2i.toml` (the file is compiled in, and it names its public
//! sources and marks its assumptions). Another machine is another preset:
//! `key = value` lines with the same keys, parsed by [`Machine::from_preset_str`].

use std::fmt;

/// The default preset's text.
pub const MTIA2I_PRESET: &str = include_str!("../../presets/mtia2i.toml");

/// The text of the MTIA-1-like preset (Meta's first-generation chip, ISCA 2023).
pub const MTIA1_PRESET: &str = include_str!("../../presets/mtia1.toml");

/// An accelerator: a grid of processing elements (PEs) with local memory, an
/// on-chip SRAM and an off-chip LPDDR shared by all PEs.
#[derive(Clone, PartialEq, Debug)]
pub struct Machine {
    /// The preset's name.
    pub name: String,
    /// PE grid rows.
    pub pe_rows: usize,
    /// PE grid columns.
    pub pe_cols: usize,
    /// Clock frequency in GHz.
    pub clock_ghz: f64,
    /// Local memory per PE, in bytes.
    pub local_memory_bytes: u64,
    /// Local memory bandwidth per PE, in GB/s.
    pub local_bandwidth_gbps: f64,
    /// On-chip SRAM, in bytes.
    pub sram_bytes: u64,
    /// SRAM bandwidth for the whole chip, in GB/s.
    pub sram_bandwidth_gbps: f64,
    /// Granularity of the SRAM read cache, in bytes.
    pub sram_line_bytes: u64,
    /// Off-chip LPDDR, in bytes.
    pub lpddr_bytes: u64,
    /// LPDDR bandwidth for the whole chip, in GB/s.
    pub lpddr_bandwidth_gbps: f64,
    /// Dot-engine throughput of the chip for f16/bf16 inputs, in TFLOPS.
    pub dot_tflops_f16: f64,
    /// Dot-engine throughput of the chip for f32 inputs, in TFLOPS.
    pub dot_tflops_f32: f64,
    /// Vector-engine throughput of the chip on 32-bit (and wider) elements, in TFLOPS.
    pub vector_tflops_f32: f64,
    /// Vector-engine throughput of the chip on f16/bf16 elements, in TFLOPS.
    pub vector_tflops_f16: f64,
    /// Fixed cost of a kernel launch, in microseconds.
    pub launch_overhead_us: f64,
}

/// An error in a preset file, with the 1-based line it is on (0: the whole file).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct PresetError {
    /// The line of the error, 0 when it concerns the whole file (a missing key).
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for PresetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "preset: {}", self.message)
        } else {
            write!(f, "preset line {}: {}", self.line, self.message)
        }
    }
}

impl std::error::Error for PresetError {}

/// Every key a preset must set.
const KEYS: [&str; 16] = [
    "name",
    "pe_rows",
    "pe_cols",
    "clock_ghz",
    "local_memory_kib",
    "local_bandwidth_gbps",
    "sram_mib",
    "sram_bandwidth_gbps",
    "sram_line_bytes",
    "lpddr_gib",
    "lpddr_bandwidth_gbps",
    "dot_tflops_f16",
    "dot_tflops_f32",
    "vector_tflops_f32",
    "vector_tflops_f16",
    "launch_overhead_us",
];

impl Machine {
    /// The MTIA-2i-like default machine.
    pub fn mtia2i() -> Machine {
        // The preset is compiled in and covered by a test, so it always parses.
        Machine::from_preset_str(MTIA2I_PRESET)
            .unwrap_or_else(|e| unreachable!("the built-in preset is invalid: {e}"))
    }

    /// The MTIA-1-like machine (`presets/mtia1.toml`).
    pub fn mtia1() -> Machine {
        Machine::from_preset_str(MTIA1_PRESET)
            .unwrap_or_else(|e| unreachable!("the built-in preset is invalid: {e}"))
    }

    /// The built-in preset named `name` (`mtia2i`, `mtia1`), if there is one.
    pub fn builtin(name: &str) -> Option<Machine> {
        match name {
            "mtia2i" => Some(Machine::mtia2i()),
            "mtia1" => Some(Machine::mtia1()),
            _ => None,
        }
    }

    /// Reads a preset: `key = value` lines (numbers, or a double-quoted string for
    /// `name`), `#` comments, every key required and none unknown or repeated.
    pub fn from_preset_str(text: &str) -> Result<Machine, PresetError> {
        let keys = &KEYS;
        let mut values: Vec<Option<(usize, &str)>> = vec![None; keys.len()];
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let content = strip_comment(raw).trim();
            if content.is_empty() {
                continue;
            }
            let err = |message: String| PresetError { line, message };
            let Some((key, value)) = content.split_once('=') else {
                return Err(err(format!("expected `key = value`, found `{content}`")));
            };
            let (key, value) = (key.trim(), value.trim());
            let Some(k) = keys.iter().position(|&k| k == key) else {
                return Err(err(format!(
                    "unknown key `{key}` (known: {})",
                    keys.join(", ")
                )));
            };
            if values[k].is_some() {
                return Err(err(format!("`{key}` is set twice")));
            }
            values[k] = Some((line, value));
        }
        let missing: Vec<&str> = keys
            .iter()
            .zip(&values)
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| *k)
            .collect();
        if !missing.is_empty() {
            return Err(PresetError {
                line: 0,
                message: format!(
                    "missing key{}: {}",
                    if missing.len() == 1 { "" } else { "s" },
                    missing.join(", ")
                ),
            });
        }
        let get = |key: &str| {
            let i = keys.iter().position(|&k| k == key).unwrap_or(0);
            values[i].unwrap_or((0, ""))
        };
        let number = |key: &str| -> Result<f64, PresetError> {
            let (line, v) = get(key);
            match v.parse::<f64>() {
                Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
                _ => Err(PresetError {
                    line,
                    message: format!("`{key}` must be a positive number, got `{v}`"),
                }),
            }
        };
        let integer = |key: &str, max: u64| -> Result<u64, PresetError> {
            let (line, v) = get(key);
            match v.parse::<u64>() {
                Ok(x) if x >= 1 && x <= max => Ok(x),
                _ => Err(PresetError {
                    line,
                    message: format!("`{key}` must be an integer from 1 to {max}, got `{v}`"),
                }),
            }
        };
        let (name_line, name) = get("name");
        let Some(name) = name
            .strip_prefix('"')
            .and_then(|n| n.strip_suffix('"'))
            .filter(|n| !n.is_empty() && !n.contains('"'))
        else {
            return Err(PresetError {
                line: name_line,
                message: format!("`name` must be a non-empty double-quoted string, got `{name}`"),
            });
        };
        Ok(Machine {
            name: name.to_string(),
            pe_rows: integer("pe_rows", 256)? as usize,
            pe_cols: integer("pe_cols", 256)? as usize,
            clock_ghz: number("clock_ghz")?,
            local_memory_bytes: integer("local_memory_kib", 1 << 30)? << 10,
            local_bandwidth_gbps: number("local_bandwidth_gbps")?,
            sram_bytes: integer("sram_mib", 1 << 30)? << 20,
            sram_bandwidth_gbps: number("sram_bandwidth_gbps")?,
            sram_line_bytes: integer("sram_line_bytes", 1 << 20)?,
            lpddr_bytes: integer("lpddr_gib", 1 << 20)? << 30,
            lpddr_bandwidth_gbps: number("lpddr_bandwidth_gbps")?,
            dot_tflops_f16: number("dot_tflops_f16")?,
            dot_tflops_f32: number("dot_tflops_f32")?,
            vector_tflops_f32: number("vector_tflops_f32")?,
            vector_tflops_f16: number("vector_tflops_f16")?,
            launch_overhead_us: {
                let (line, v) = get("launch_overhead_us");
                match v.parse::<f64>() {
                    Ok(x) if x.is_finite() && x >= 0.0 => x,
                    _ => {
                        return Err(PresetError {
                            line,
                            message: format!(
                                "`launch_overhead_us` must be a number >= 0, got `{v}`"
                            ),
                        })
                    }
                }
            },
        })
    }

    /// Number of PEs.
    pub fn pes(&self) -> usize {
        self.pe_rows * self.pe_cols
    }

    /// Clock cycles per second.
    pub fn clock_hz(&self) -> f64 {
        self.clock_ghz * 1e9
    }
}

/// The part of a line before an unquoted `#`.
fn strip_comment(line: &str) -> &str {
    let mut quoted = false;
    for (i, c) in line.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '#' if !quoted => return &line[..i],
            _ => {}
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_preset_has_the_published_figures() {
        let m = Machine::mtia2i();
        assert_eq!(m.name, "mtia2i");
        assert_eq!(m.pes(), 64);
        assert_eq!(m.local_memory_bytes, 384 * 1024);
        assert_eq!(m.sram_bytes, 256 << 20);
        assert_eq!(m.lpddr_bytes, 128 << 30);
        assert_eq!(m.lpddr_bandwidth_gbps, 204.8);
        assert_eq!(m.dot_tflops_f16, 177.0);
        assert_eq!(m.vector_tflops_f32, 2.76);
    }

    #[test]
    fn the_mtia1_preset_has_the_published_figures() {
        let m = Machine::mtia1();
        assert_eq!(m.name, "mtia1");
        assert_eq!(m.pes(), 64);
        assert_eq!(m.clock_ghz, 0.8);
        assert_eq!(m.local_memory_bytes, 128 * 1024);
        assert_eq!(m.sram_bytes, 128 << 20);
        assert_eq!(m.sram_bandwidth_gbps, 800.0);
        assert_eq!(m.lpddr_bandwidth_gbps, 176.0);
        assert_eq!(m.dot_tflops_f16, 51.2);
        assert_eq!(Machine::builtin("mtia1"), Some(m));
        assert_eq!(Machine::builtin("mtia2i"), Some(Machine::mtia2i()));
        assert_eq!(Machine::builtin("mtia3"), None);
    }

    #[test]
    fn preset_errors_name_the_line() {
        let bad = MTIA2I_PRESET.replace("clock_ghz = 1.35", "clock_ghz = fast");
        let e = Machine::from_preset_str(&bad).unwrap_err();
        assert!(
            e.message.contains("`clock_ghz` must be a positive number"),
            "{e}"
        );
        assert_eq!(
            MTIA2I_PRESET
                .lines()
                .nth(e.line - 1)
                .map(|l| l.starts_with("clock_ghz")),
            Some(true)
        );
        let e = Machine::from_preset_str("name = \"x\"\n").unwrap_err();
        assert!(
            e.to_string().starts_with("preset: missing keys: pe_rows"),
            "{e}"
        );
        let e =
            Machine::from_preset_str(&format!("{MTIA2I_PRESET}\nwarp_size = 32\n")).unwrap_err();
        assert!(e.message.contains("unknown key `warp_size`"), "{e}");
        let e = Machine::from_preset_str(&format!("{MTIA2I_PRESET}\npe_rows = 4\n")).unwrap_err();
        assert!(e.message.contains("set twice"), "{e}");
        let e = Machine::from_preset_str(&MTIA2I_PRESET.replace("pe_rows = 8", "pe_rows = 0"))
            .unwrap_err();
        assert!(e.message.contains("integer from 1"), "{e}");
    }

    #[test]
    fn another_machine_is_another_preset() {
        let small = MTIA2I_PRESET
            .replace("pe_rows = 8", "pe_rows = 2")
            .replace("name = \"mtia2i\"", "name = \"tiny # chip\"");
        let m = Machine::from_preset_str(&small).unwrap();
        assert_eq!((m.name.as_str(), m.pes()), ("tiny # chip", 16));
    }
}
