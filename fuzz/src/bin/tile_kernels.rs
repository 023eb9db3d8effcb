//! AFL++ harness: `targets::tile_target` (see `tests/targets/mod.rs`). A broken promise panics,
//! which AFL++ records as a crash.

#[path = "../../../tests/targets/mod.rs"]
mod targets;

fn main() {
    afl::fuzz!(|data: &[u8]| {
        if let Err(why) = targets::tile_target(data) {
            panic!("{why}");
        }
    });
}
