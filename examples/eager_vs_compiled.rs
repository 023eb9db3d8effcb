//! Eager versus compiled: the same models run op by op on the interpreter (eager mode),
//! compiled for the CPU one kernel per op (unfused), and compiled with fusion.
//!
//! ```text
//! cargo run --release --example eager_vs_compiled
//! ```

mod models;

use ferrite::{Options, Target, Tensor};
use std::time::{Duration, Instant};

/// The median time of `runs` calls of `f`, after one warm-up call.
fn time(
    runs: usize,
    mut f: impl FnMut() -> Result<Vec<Tensor>, ferrite::Error>,
) -> Result<Duration, ferrite::Error> {
    f()?;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        f()?;
        times.push(start.elapsed());
    }
    times.sort();
    Ok(times[runs / 2])
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn report(name: &str, eager: Duration, unfused: Duration, fused: Duration) {
    println!("{name}");
    println!("  eager (interpreter, op by op) {:9.3} ms", ms(eager));
    println!("  compiled, unfused             {:9.3} ms", ms(unfused));
    println!("  compiled, fused               {:9.3} ms", ms(fused));
    println!(
        "  fused is {:.1}x faster than eager, {:.2}x faster than unfused",
        eager.as_secs_f64() / fused.as_secs_f64(),
        unfused.as_secs_f64() / fused.as_secs_f64()
    );
}

fn main() -> Result<(), ferrite::Error> {
    let cpu = Options::default().target(Target::Cpu);

    // The MLP, built with the builder.
    let batch = 64;
    let g = models::mlp_graph(batch);
    let x = models::uniform(&[batch, models::MLP_IN], 0, 1.0);
    let weights = models::mlp_weights();
    let inputs = models::with_weights(&x, &weights);
    let eager = ferrite::compile(&g, &Options::default().target(Target::Interp))?;
    let unfused = ferrite::compile(&g, &cpu.clone().fuse(false))?;
    let fused = ferrite::compile(&g, &cpu)?;
    let want = eager.run(&inputs)?;
    for exe in [&unfused, &fused] {
        let got = exe.run(&inputs)?;
        got[0].check_close(&want[0], 1e-4, 1e-6)?;
    }
    println!(
        "kernels: {} unfused, {} fused",
        unfused.kernel_count().unwrap_or(0),
        fused.kernel_count().unwrap_or(0)
    );
    report(
        &format!("mlp, batch {batch}"),
        time(3, || eager.run(&inputs))?,
        time(20, || unfused.run(&inputs))?,
        time(20, || fused.run(&inputs))?,
    );

    // The transformer block, a closure through jit.
    let block = models::transformer_block();
    let x = models::uniform(&[4, 32, models::D_MODEL], 7, 1.0);
    let weights = models::block_weights();
    let inputs = models::with_weights(&x, &weights);
    let unfused = ferrite::jit(models::transformer_block()).options(cpu.clone().fuse(false));
    let fused = ferrite::jit(models::transformer_block()).options(cpu);
    let want = ferrite::eager(&block, &inputs)?;
    for f in [&unfused, &fused] {
        let got = f.run(&inputs)?;
        got[0].check_close(&want[0], 1e-3, 1e-4)?;
    }
    report(
        "transformer block, batch 4, sequence 32",
        time(3, || ferrite::eager(&block, &inputs))?,
        time(20, || unfused.run(&inputs))?,
        time(20, || fused.run(&inputs))?,
    );
    Ok(())
}
