//! An inference MLP built with the graph builder, compiled for the CPU and checked
//! against the reference interpreter.
//!
//! ```text
//! cargo run --example mlp [-- DUMP_DIR]
//! ```
//!
//! With a directory argument, every compiler stage is written there as text.

mod models;

use ferrite::{Options, Target, Tensor};
use std::time::Instant;

fn main() -> Result<(), ferrite::Error> {
    let batch = 64;
    let g = models::mlp_graph(batch);
    println!("{g}");

    let mut options = Options::default().target(Target::Cpu);
    if let Some(dir) = std::env::args().nth(1) {
        options = options.dump(dir);
    }
    let exe = ferrite::compile(&g, &options)?;
    println!(
        "compiled in {:.1} ms into {} kernels",
        exe.compile_time().as_secs_f64() * 1e3,
        exe.kernel_count().unwrap_or(0)
    );
    for (stage, time) in exe.stage_times() {
        println!("  {stage:<12} {:8.2} ms", time.as_secs_f64() * 1e3);
    }

    let x = models::uniform(&[batch, models::MLP_IN], 0, 1.0);
    let weights = models::mlp_weights();
    let inputs = models::with_weights(&x, &weights);

    let start = Instant::now();
    let out = exe.run(&inputs)?;
    println!("ran in {:.2} ms", start.elapsed().as_secs_f64() * 1e3);

    // The same graph on the reference interpreter: the oracle.
    let reference =
        ferrite::compile(&g, &Options::default().target(Target::Interp))?.run(&inputs)?;
    out[0].check_close(&reference[0], 1e-4, 1e-6)?;
    assert_eq!(out[1], reference[1], "predicted classes differ");

    let classes = out[1].to_vec::<i64>()?;
    println!("probabilities: {}", out[0]);
    println!("predicted classes of the first rows: {:?}", &classes[..8]);
    println!("matches the interpreter");

    // A wrong input is a typed error, not a panic.
    let wrong = Tensor::zeros(&ferrite::f32(&[batch, 100]))?;
    let err = exe
        .run(&models::with_weights(&wrong, &weights))
        .unwrap_err();
    println!("with a wrong input: {err}");
    Ok(())
}
