//! Memory-plan tests: liveness, reuse, slots, and the peaks of fused and unfused
//! schedules.

use ferrite_passes::memory::{plan_memory, MemoryPlan};
use ferrite_passes::schedule::{schedule, ScheduleOptions};
use ferrite_testkit::{example, primitive};

/// No two intermediates alive during a common kernel share a slot, every slot holds
/// what is placed in it, and the storage is the sum of the slots.
fn assert_sound(plan: &MemoryPlan) {
    for (i, a) in plan.allocations.iter().enumerate() {
        let slot = plan.slots[a.slot];
        assert!(a.size <= slot.bytes(), "{a:?} does not fit {slot:?}");
        assert!(a.first <= a.last);
        for b in &plan.allocations[i + 1..] {
            let time = a.first <= b.last && b.first <= a.last;
            assert!(!(time && a.slot == b.slot), "{a:?} overlaps {b:?}");
        }
    }
    let slots: usize = plan.slots.iter().map(|s| s.bytes()).sum();
    assert_eq!(plan.arena_bytes, slots);
    assert!(plan.peak_live_bytes <= plan.arena_bytes);
    // Never worse than no reuse at all.
    assert!(plan.arena_bytes <= plan.total_bytes);
}

#[test]
fn a_chain_reuses_two_slots() {
    // Unfused: e1, e2, e3 are intermediates, each live from its kernel to the next.
    let g = primitive("graph c(x: f32[256]) { return neg(exp(sin(cos(x)))) }");
    let s = schedule(&g, &ScheduleOptions::unfused()).unwrap();
    let plan = &s.memory;
    assert_sound(plan);
    assert_eq!(plan.allocations.len(), 3);
    assert_eq!(plan.total_bytes, 3 * 1024);
    // Two 1 KiB buffers are alive at once (a kernel's input and output), never three.
    assert_eq!(plan.peak_live_bytes, 2048);
    assert_eq!(plan.arena_bytes, 2048);
    assert!(
        plan.peak_bytes() < plan.total_bytes,
        "reuse must save memory"
    );
    let slots: Vec<usize> = plan.allocations.iter().map(|a| a.slot).collect();
    assert_eq!(slots, vec![0, 1, 0], "the third reuses the first's slot");
    // Fused, nothing intermediate remains.
    let fused = schedule(&g, &ScheduleOptions::default()).unwrap();
    assert_eq!(fused.memory.peak_bytes(), 0);
}

#[test]
fn lifetimes_extend_to_the_last_reader() {
    // `a` is read by the last kernel, so it overlaps every other intermediate.
    let g = primitive(
        "graph l(x: f32[64]) {
           a = exp(x)
           b = sin(a)
           c = cos(b)
           return add(c, a)
         }",
    );
    let s = schedule(&g, &ScheduleOptions::unfused()).unwrap();
    assert_sound(&s.memory);
    let a = &s.memory.allocations[0];
    assert_eq!((a.first, a.last), (0, 3));
    assert_eq!(s.memory.peak_live_bytes, 3 * 256);
}

#[test]
fn fused_peaks_never_exceed_unfused_peaks() {
    for name in [
        "pointwise_chain",
        "softmax_rows",
        "layer_norm_rows",
        "mlp",
        "attention",
        "embedding",
        "llama_mlp",
        "transformer_block",
    ] {
        let g = example(name);
        let f = schedule(&g, &ScheduleOptions::default()).unwrap();
        let u = schedule(&g, &ScheduleOptions::unfused()).unwrap();
        assert_sound(&f.memory);
        assert_sound(&u.memory);
        assert!(
            f.memory.peak_bytes() <= u.memory.peak_bytes(),
            "{name}: fused {} > unfused {}",
            f.memory.peak_bytes(),
            u.memory.peak_bytes()
        );
        // Slots are typed: embedding's three f32 intermediates are live at once, and
        // its one i64 intermediate cannot share their memory.
        assert!(
            u.memory.peak_bytes() < u.memory.total_bytes || name == "embedding",
            "{name}: no reuse"
        );
        assert_eq!(plan_memory(&f.program), f.memory, "plans are deterministic");
    }
}

#[test]
fn random_schedules_have_sound_plans() {
    for seed in 0..40 {
        let rg = ferrite_testkit::random_graph(seed, 14, seed % 2 == 1);
        let g = ferrite_passes::decompose::decompose(&rg.graph).unwrap();
        for opts in [ScheduleOptions::default(), ScheduleOptions::unfused()] {
            let s = schedule(&g, &opts).unwrap();
            assert_sound(&s.memory);
        }
    }
}

#[test]
fn the_plan_prints_every_buffer() {
    let g = primitive("graph p(x: f32[16]) { return exp(sin(x)) }");
    let s = schedule(&g, &ScheduleOptions::unfused()).unwrap();
    let text = s.memory.to_string();
    assert!(
        text.starts_with("memory plan: 1 intermediates, 64 B without reuse, arena 64 B"),
        "{text}"
    );
    assert!(text.contains("buf1"), "{text}");
}
