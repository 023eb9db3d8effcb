//! The library as a new user meets it: everything through `ferrite::` paths alone
//! (no other Ferrite crate is named here), inputs by name, profile and simulator
//! reports, machine presets, and which errors are the user's.

use ferrite::profile::{chrome_trace, render_table, to_json, ProfileReport, ProfileStep};
use ferrite::sim::{read_preset, DeviceReport, Machine};
use ferrite::{Compiled, Error, Graph, Mismatch, Options, Target, Tensor};

/// `y = relu(x @ w1) @ w2`: two weights of the same type, so that only their names
/// tell them apart.
fn two_layers() -> Graph {
    let g = Graph::new("two_layers");
    let x = g.input("x", ferrite::f32(&[4, 8]));
    let w1 = g.input("w1", ferrite::f32(&[8, 8]));
    let w2 = g.input("w2", ferrite::f32(&[8, 8]));
    g.output(&x.matmul(&w1).relu().matmul(&w2));
    g
}

fn inputs() -> [Tensor; 3] {
    let ty = |shape: &[usize]| ferrite::f32(shape);
    [
        Tensor::random(&ty(&[4, 8]), 1).unwrap(),
        Tensor::random(&ty(&[8, 8]), 2).unwrap(),
        Tensor::random(&ty(&[8, 8]), 3).unwrap(),
    ]
}

fn compiled(target: Target) -> Compiled {
    ferrite::compile(&two_layers(), &Options::default().target(target)).unwrap()
}

#[test]
fn inputs_go_in_by_name_and_a_swap_cannot_go_unnoticed() {
    let exe = compiled(Target::Cpu);
    assert_eq!(exe.input_names(), ["x", "w1", "w2"]);
    let [x, w1, w2] = inputs();
    let by_position = exe.run(&[&x, &w1, &w2]).unwrap();
    let by_name = exe
        .run_named(&[("w2", &w2), ("x", &x), ("w1", &w1)])
        .unwrap();
    assert_eq!(by_name, by_position);
    // Swapping the two weights by position runs, and computes something else...
    let swapped = exe.run(&[&x, &w2, &w1]).unwrap();
    assert!(swapped[0].check_close(&by_position[0], 1e-6, 1e-6).is_err());
    // ...while every naming mistake is a typed error that names the input.
    let err = exe.run_named(&[("x", &x), ("w1", &w1)]).unwrap_err();
    assert_eq!(err, Error::MissingInput { name: "w2".into() });
    let err = exe
        .run_named(&[("x", &x), ("w1", &w1), ("w2", &w2), ("w3", &w2)])
        .unwrap_err();
    assert!(
        matches!(&err, Error::UnknownInput { name, inputs } if name == "w3" && inputs.len() == 3)
    );
    assert_eq!(
        err.to_string(),
        "the program has no input `w3` (its inputs: x, w1, w2)"
    );
    let err = exe
        .run_named(&[("x", &x), ("w1", &w1), ("w1", &w2)])
        .unwrap_err();
    assert_eq!(err, Error::DuplicateInput { name: "w1".into() });
    // A right name with a wrong type is reported as `run` reports it.
    let err = exe.run_named(&[("x", &w1), ("w1", &w1), ("w2", &w2)]);
    assert!(matches!(
        err.unwrap_err(),
        Error::InputShape { index: 0, .. }
    ));
    // `inputs_by_name` orders them for the other positional methods.
    let ordered = exe
        .inputs_by_name(&[("w1", &w1), ("w2", &w2), ("x", &x)])
        .unwrap();
    assert_eq!(exe.execute(&ordered).unwrap().into_outputs(), by_position);
}

#[test]
fn execute_and_run_take_the_same_tensors() {
    let [x, w1, w2] = inputs();
    let want = compiled(Target::Interp).run(&[&x, &w1, &w2]).unwrap();
    for target in [Target::Cpu, Target::Sim, Target::Loops] {
        let exe = compiled(target);
        let run = exe.execute(&[&x, &w1, &w2]).unwrap();
        assert_eq!(run.device_report().is_some(), target == Target::Sim);
        let got: &Tensor = &run.outputs()[0];
        got.check_close(&want[0], 1e-4, 1e-4).unwrap();
        assert_eq!(
            exe.run(&[x.clone(), w1.clone(), w2.clone()]).unwrap()[0],
            *got
        );
    }
    // `check_close` says why, typed, and converts into an `Error` for `?`.
    let err = x.check_close(&w1, 0.0, 0.0).unwrap_err();
    assert!(matches!(err, Mismatch::Type { .. }), "{err}");
    let err: Error = want[0]
        .check_close(&Tensor::full(&[4, 8], 1e6f32).unwrap(), 1e-3, 0.0)
        .unwrap_err()
        .into();
    assert!(matches!(err, Error::NotClose(Mismatch::Element { .. })));
    assert!(!err.is_internal());
}

#[test]
fn profile_reports_render_as_table_json_and_trace() {
    let [x, w1, w2] = inputs();
    let exe = ferrite::compile(&two_layers(), &Options::default().threads(2)).unwrap();
    // One schedule, no progress callback needed.
    let fused = exe.profile(&[&x, &w1, &w2], 2).unwrap();
    assert!(fused.fused && !fused.kernels.is_empty());
    // Fused against unfused, as `ferrite profile` prints it.
    let mut steps = Vec::new();
    let report: ProfileReport = exe
        .profile_report_with_progress(&[&x, &w1, &w2], 2, &mut |s| steps.push(s))
        .unwrap();
    assert_eq!(Target::from(report.target), Target::Cpu);
    assert_eq!((report.runs, report.threads), (2, Some(2)));
    assert!(report.fused.kernels.len() < report.unfused.kernels.len());
    assert_eq!(steps.first(), Some(&ProfileStep::CompilingUnfused));
    assert!(steps.contains(&ProfileStep::Timed {
        fused: false,
        done: 2,
        runs: 2
    }));
    assert_eq!(steps.last(), Some(&ProfileStep::MeasuringBandwidth));
    assert!(render_table(&report).contains("fused vs unfused: "));
    assert!(to_json(&report).contains("\"target\": \"cpu\""));
    assert!(chrome_trace(&report).contains("traceEvents"));

    // On the simulator the report names the machine it simulated.
    let sim = compiled(Target::Sim)
        .profile_report(&[&x, &w1, &w2], 1)
        .unwrap();
    assert_eq!(sim.machine.as_ref().unwrap().name, Machine::mtia2i().name);
    assert!(sim.fused.total_cycles.is_some());

    // The interpreter has no kernels to measure: the user's mistake, not a bug.
    let err = compiled(Target::Interp)
        .profile_report(&[&x, &w1, &w2], 1)
        .unwrap_err();
    assert!(matches!(
        err,
        Error::WrongTarget {
            target: Target::Interp,
            ..
        }
    ));
    assert!(!err.is_internal());
}

#[test]
fn simulator_reports_and_machine_presets() {
    let preset = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/runtime/accel/presets/mtia2i.toml"
    );
    let machine = read_preset(preset).unwrap();
    assert_eq!(machine, Machine::mtia2i());
    // A machine with half the PEs: same results, its own timing.
    let mut small = machine.clone();
    small.pe_rows /= 2;
    let [x, w1, w2] = inputs();
    let mut reports: Vec<DeviceReport> = Vec::new();
    let mut outputs = Vec::new();
    for m in [machine, small] {
        let options = Options::default().target(Target::Sim).machine(m);
        let exe = ferrite::compile(&two_layers(), &options).unwrap();
        let run = exe.execute(&[&x, &w1, &w2]).unwrap();
        reports.push(run.device_report().unwrap().clone());
        outputs.push(run.into_outputs());
    }
    assert_eq!(outputs[0], outputs[1]);
    assert!(reports
        .iter()
        .all(|r| r.cycles() > 0 && !r.launches.is_empty()));

    // Preset files that cannot be read or do not describe a machine are typed errors.
    let err = read_preset("no/such/preset.toml").unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err:?}");
    let bad = std::env::temp_dir().join(format!("ferrite-facade-{}.toml", std::process::id()));
    std::fs::write(&bad, "name = \"half a machine\"\n").unwrap();
    let err = read_preset(&bad).unwrap_err();
    std::fs::remove_file(&bad).unwrap();
    assert!(matches!(err, Error::Preset { .. }), "{err:?}");
    assert!(err.to_string().contains("missing keys"), "{err}");
    assert!(!err.is_internal());
}

#[test]
fn user_mistakes_are_not_internal_errors() {
    assert_eq!("loops".parse::<Target>().unwrap(), Target::Loops);
    let err = "gpu".parse::<Target>().unwrap_err();
    assert_eq!(err, Error::UnknownTarget { name: "gpu".into() });
    let err = ferrite::compile(&two_layers(), &Options::default().threads(100_000)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidOption {
                option: "threads",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!err.is_internal());
    let err = compiled(Target::Interp).unfused().unwrap_err();
    assert!(matches!(err, Error::WrongTarget { .. }) && !err.is_internal());
    let err = compiled(Target::Cpu).run(&[&inputs()[0]]).unwrap_err();
    assert!(matches!(err, Error::InputCount { .. }) && !err.is_internal());
}
