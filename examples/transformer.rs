//! A transformer block written as an ordinary closure, captured by `ferrite::jit`, and
//! run with two batch sizes: the second shape fails the guard of the first compile and
//! recompiles; calls with a shape seen before hit the cache. The same closure then runs
//! on the accelerator simulator.
//!
//! ```text
//! cargo run --example transformer
//! ```

mod models;

use ferrite::{Target, Tensor};
use std::time::Instant;

fn main() -> Result<(), ferrite::Error> {
    let block = ferrite::jit(models::transformer_block())
        .name("transformer_block")
        .on_event(|event| println!("  [jit] {event}"));
    let weights = models::block_weights();
    let seq = 32;

    for batch in [2, 8, 2, 8, 8] {
        let x = models::uniform(&[batch, seq, models::D_MODEL], batch as u64, 1.0);
        let inputs = models::with_weights(&x, &weights);
        let start = Instant::now();
        let y = block.run(&inputs)?;
        println!(
            "batch {batch}: {:7.2} ms  y = {}",
            start.elapsed().as_secs_f64() * 1e3,
            y[0]
        );
        // The same closure, op by op on the interpreter.
        let eager = block.run_eager(&inputs)?;
        y[0].check_close(&eager[0], 1e-3, 1e-4)?;
    }

    let stats = block.stats();
    println!(
        "calls {}, hits {}, misses {}, compiles {}, recompiles {}, eager {}",
        stats.calls, stats.hits, stats.misses, stats.compiles, stats.recompiles, stats.eager_calls
    );
    println!("compiled and eager results agree for every call");

    // The same closure compiled for the accelerator simulator.
    let on_sim = ferrite::jit(models::transformer_block())
        .name("transformer_block_sim")
        .options(ferrite::Options::default().target(Target::Sim));
    let x = models::uniform(&[2, seq, models::D_MODEL], 2, 1.0);
    let inputs = models::with_weights(&x, &weights);
    let (cpu, sim) = (block.run(&inputs)?, on_sim.run(&inputs)?);
    sim[0].check_close(&cpu[0], 1e-4, 1e-4)?;
    println!("the simulator agrees with the CPU on batch 2");

    // What the first compile produced.
    let signature: Vec<_> = models::with_weights(
        &Tensor::zeros(&ferrite::f32(&[2, seq, models::D_MODEL]))?,
        &weights,
    )
    .iter()
    .map(|a| a.ty().clone())
    .collect();
    if let Some(exe) = block.compiled(&signature) {
        assert_eq!(exe.target(), Target::Cpu);
        println!("batch 2 runs {} kernels", exe.kernel_count().unwrap_or(0));
    }
    Ok(())
}
