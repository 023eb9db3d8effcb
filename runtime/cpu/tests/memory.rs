//! The memory plan is the CPU's storage: the "peak intermediate memory" that `ferrite
//! compile` and `ferrite profile` print (the plan's `peak_bytes`) is what a run of the
//! compiled program allocates.

use ferrite_cpu::{CpuOptions, CpuProgram};
use ferrite_passes::pipeline::{lower_graph, PipelineOptions};
use ferrite_passes::schedule::ScheduleOptions;

fn options(fuse: bool) -> PipelineOptions {
    PipelineOptions {
        schedule: if fuse {
            ScheduleOptions::default()
        } else {
            ScheduleOptions::unfused()
        },
        ..PipelineOptions::default()
    }
}

#[test]
fn every_example_allocates_exactly_the_planned_peak() {
    for name in ferrite_testkit::example_names() {
        let g = ferrite_testkit::example_graph(&name);
        for fuse in [true, false] {
            let lowered = lower_graph(&g, &options(fuse)).unwrap();
            let s = &lowered.scheduled;
            let cpu = CpuProgram::compile(&s.program, &CpuOptions::with_threads(1)).unwrap();
            assert_eq!(
                cpu.storage_bytes(),
                s.memory.peak_bytes(),
                "{name} (fuse: {fuse}): the CPU allocates other than the plan says\n{}",
                s.memory
            );
        }
    }
}

#[test]
fn random_programs_allocate_at_least_the_planned_peak() {
    // Equal unless a GEMM product temporary of the CPU's finds no free slot.
    for seed in 0..24 {
        let rg = ferrite_testkit::random_graph(seed, 12, seed % 2 == 1);
        for fuse in [true, false] {
            let lowered = lower_graph(&rg.graph, &options(fuse)).unwrap();
            let s = &lowered.scheduled;
            let cpu = CpuProgram::compile(&s.program, &CpuOptions::with_threads(1)).unwrap();
            assert!(
                cpu.storage_bytes() >= s.memory.peak_bytes(),
                "seed {seed} (fuse: {fuse})"
            );
            if !cpu.program().kernels.iter().any(|k| k.gemm.is_some()) {
                assert_eq!(cpu.storage_bytes(), s.memory.peak_bytes(), "seed {seed}");
            }
        }
    }
}
