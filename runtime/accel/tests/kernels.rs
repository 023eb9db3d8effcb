//! The hand-written kernels of `examples/kernels/` on the simulator, against the
//! reference interpreter; and the simulator's runtime errors.

use ferrite_accel::sim::{self, DeviceArg, KernelArg, Machine, Placement, SimError};
use ferrite_accel::tile::{self, CheckedKernel};
use ferrite_ir::{interpret, DType, Tensor, TensorType};

fn example(name: &str) -> CheckedKernel {
    let (shown, src) = ferrite_testkit::tile_example_source(name);
    tile::parse_and_check(&shown, &src).unwrap_or_else(|d| panic!("{d}"))
}

fn kernel(src: &str) -> CheckedKernel {
    tile::parse_and_check("test.tile", src).unwrap_or_else(|d| panic!("{d}"))
}

/// Evaluates a `.fg` graph with the reference interpreter.
fn reference(fg: &str, inputs: &[Tensor]) -> Vec<Tensor> {
    let g = ferrite_ir::parse("reference.fg", fg).unwrap_or_else(|d| panic!("{d}"));
    interpret(&g, inputs).unwrap()
}

fn random(shape: &[usize], seed: u64) -> Tensor {
    Tensor::random(&TensorType::new(DType::F32, shape.to_vec()).unwrap(), seed)
}

fn zeros(shape: &[usize]) -> Tensor {
    Tensor::zeros(&TensorType::new(DType::F32, shape.to_vec()).unwrap())
}

/// A one-element `f32` buffer `out` in LPDDR, for kernels that store one value.
fn one_float_out(dev: &mut sim::Device) -> sim::BufferId {
    dev.upload("out", &zeros(&[1]), Placement::Lpddr).unwrap()
}

fn buffer(args: &[KernelArg], i: usize) -> &Tensor {
    match &args[i] {
        KernelArg::Buffer(t) => t,
        other => panic!("argument {i} is not a buffer: {other:?}"),
    }
}

#[test]
fn vector_add_matches_the_interpreter() {
    let k = example("vector_add");
    let n = 3000;
    let (x, y) = (random(&[n], 1), random(&[n], 2));
    let mut args = [
        KernelArg::Buffer(x.clone()),
        KernelArg::Buffer(y.clone()),
        KernelArg::Buffer(zeros(&[n])),
        KernelArg::Int(n as i64),
    ];
    let report = sim::run(&Machine::mtia2i(), &k, [3, 1, 1], &mut args).unwrap();
    let want = reference(
        "graph g(x: f32[3000], y: f32[3000]) {\n  z = add(x, y)\n  return z\n}\n",
        &[x, y],
    );
    buffer(&args, 2).check_close(&want[0], 0.0, 0.0).unwrap();
    // Masked-off lanes move nothing: exactly 2 reads and 1 write per element.
    assert_eq!(report.bytes.lpddr_read, 2 * n as u64 * 4);
    assert_eq!(report.bytes.lpddr_write, n as u64 * 4);
    assert_eq!(report.programs, 3);
    assert!(report.cycles > report.launch_cycles);
}

#[test]
fn softmax_rows_matches_the_interpreter() {
    let k = example("softmax_rows");
    let (m, n) = (10, 37);
    let x = random(&[m, n], 3);
    let mut args = [
        KernelArg::Buffer(x.clone()),
        KernelArg::Buffer(zeros(&[m, n])),
        KernelArg::Int(m as i64),
        KernelArg::Int(n as i64),
    ];
    sim::run(&Machine::mtia2i(), &k, [3, 1, 1], &mut args).unwrap();
    let want = reference(
        "graph g(x: f32[10, 37]) {\n  y = softmax(x, axis=-1)\n  return y\n}\n",
        &[x],
    );
    buffer(&args, 1).check_close(&want[0], 1e-5, 1e-6).unwrap();
}

#[test]
fn layer_norm_matches_the_interpreter() {
    let k = example("layer_norm");
    let (m, n) = (9, 100);
    let (x, w, b) = (random(&[m, n], 4), random(&[n], 5), random(&[n], 6));
    let mut args = [
        KernelArg::Buffer(x.clone()),
        KernelArg::Buffer(w.clone()),
        KernelArg::Buffer(b.clone()),
        KernelArg::Buffer(zeros(&[m, n])),
        KernelArg::Int(m as i64),
        KernelArg::Int(n as i64),
        KernelArg::Float(1e-5),
    ];
    sim::run(&Machine::mtia2i(), &k, [3, 1, 1], &mut args).unwrap();
    let want = reference(
        "graph g(x: f32[9, 100], w: f32[100], b: f32[100]) {\n  y = layer_norm(x, w, b, eps=1e-5)\n  return y\n}\n",
        &[x, w, b],
    );
    buffer(&args, 3).check_close(&want[0], 1e-4, 1e-5).unwrap();
}

#[test]
fn matmul_bias_relu_matches_the_interpreter() {
    let k = example("matmul_bias_relu");
    let (m, n, kk) = (70, 90, 45);
    let (a, b, bias) = (random(&[m, kk], 7), random(&[kk, n], 8), random(&[n], 9));
    let mut args = [
        KernelArg::Buffer(a.clone()),
        KernelArg::Buffer(b.clone()),
        KernelArg::Buffer(bias.clone()),
        KernelArg::Buffer(zeros(&[m, n])),
        KernelArg::Int(m as i64),
        KernelArg::Int(n as i64),
        KernelArg::Int(kk as i64),
    ];
    // 128 x 64 blocks: a grid of 1 x 2.
    let report = sim::run(&Machine::mtia2i(), &k, [1, 2, 1], &mut args).unwrap();
    let want = reference(
        "graph g(a: f32[70, 45], b: f32[45, 90], bias: f32[90]) {\n  h = matmul(a, b)\n  y = relu(add(h, bias))\n  return y\n}\n",
        &[a, b, bias],
    );
    buffer(&args, 3).check_close(&want[0], 1e-5, 1e-5).unwrap();
    // Every tile of the grid runs dot over the full padded K: 3 slices of 16.
    assert_eq!(report.dot_flops, 2 * 2 * 128 * 64 * 48);
    // Each program reserves its two local buffers, [128, 16] and [16, 64].
    assert_eq!(k.local_memory_bytes(), (128 * 16 + 16 * 64) * 4);
    assert!(report.bytes.local_write > 0 && report.bytes.local_read > 0);
}

#[test]
fn narrow_dtypes_load_and_store_with_conversion() {
    let k = kernel(
        "kernel widen(h: *f16, g: *bf16, i: *i64, m: *bool, out: *f32, out_h: *f16) {
  o = arange(0, 4)
  s = cast(load(h + o), f32) + cast(load(g + o), f32) + cast(load(i + o), f32)
  r = where(load(m + o), s, -1.0)
  store(out + o, r)
  store(out_h + o, r * 0.1)
}
",
    );
    let ty = |d: DType| TensorType::new(d, vec![4]).unwrap();
    let h = Tensor::from_f64(&ty(DType::F16), &[0.5, 1.5, -2.0, 4.0]);
    let g = Tensor::from_f64(&ty(DType::Bf16), &[1.0, 2.0, 3.0, 0.25]);
    let i = Tensor::from_i64(&ty(DType::I64), &[10, 20, 30, 40]);
    let m = Tensor::from_i64(&ty(DType::Bool), &[1, 1, 0, 1]);
    let mut args = [
        KernelArg::Buffer(h),
        KernelArg::Buffer(g),
        KernelArg::Buffer(i),
        KernelArg::Buffer(m),
        KernelArg::Buffer(zeros(&[4])),
        KernelArg::Buffer(Tensor::zeros(&ty(DType::F16))),
    ];
    sim::run(&Machine::mtia2i(), &k, [1, 1, 1], &mut args).unwrap();
    assert_eq!(buffer(&args, 4).to_f64(), vec![11.5, 23.5, -1.0, 44.25]);
    // 11.5 * 0.1 in f16 arithmetic, rounded to f16: the tile is f32, the store converts.
    let want = Tensor::from_f64(&ty(DType::F16), &[1.15, 2.35, -0.1, 4.425]);
    buffer(&args, 5).check_close(&want, 1e-3, 0.0).unwrap();
    assert_eq!(buffer(&args, 5).ty.dtype, DType::F16);
}

#[test]
fn a_device_runs_a_sequence_of_launches_over_shared_buffers() {
    // softmax(x + y) as two launches: the sum goes through an intermediate buffer.
    let add = example("vector_add");
    let softmax = example("softmax_rows");
    let (m, n) = (8, 128);
    let (x, y) = (random(&[m, n], 10), random(&[m, n], 11));
    let mut dev = sim::Device::new(Machine::mtia2i());
    let xb = dev.upload("x", &x, Placement::Lpddr).unwrap();
    let yb = dev.upload("y", &y, Placement::Lpddr).unwrap();
    let flat = TensorType::new(DType::F32, vec![m * n]).unwrap();
    let xf = dev.alloc("x_flat", &flat, Placement::Lpddr).unwrap();
    let yf = dev.alloc("y_flat", &flat, Placement::Lpddr).unwrap();
    // The kernels take flat buffers: copy the 2-D data in through the host.
    let flat_of = |t: &Tensor| {
        Tensor::from_f32(&[m * n], t.to_f64().iter().map(|&v| v as f32).collect()).unwrap()
    };
    dev.write(xf, &flat_of(&dev.read(xb).unwrap())).unwrap();
    dev.write(yf, &flat_of(&dev.read(yb).unwrap())).unwrap();
    let sum = dev.alloc("sum", &flat, Placement::Sram).unwrap();
    let out = dev.alloc("out", &flat, Placement::Lpddr).unwrap();
    let nn = (m * n) as i64;
    dev.launch(
        &add,
        [1, 1, 1],
        &[
            DeviceArg::Buffer(xf),
            DeviceArg::Buffer(yf),
            DeviceArg::Buffer(sum),
            DeviceArg::Int(nn),
        ],
    )
    .unwrap();
    dev.launch(
        &softmax,
        [2, 1, 1],
        &[
            DeviceArg::Buffer(sum),
            DeviceArg::Buffer(out),
            DeviceArg::Int(m as i64),
            DeviceArg::Int(n as i64),
        ],
    )
    .unwrap();
    let want = reference(
        "graph g(x: f32[8, 128], y: f32[8, 128]) {\n  y2 = softmax(add(x, y), axis=-1)\n  return y2\n}\n",
        &[x, y],
    );
    let got = Tensor::from_f32(
        &[m, n],
        dev.read(out)
            .unwrap()
            .to_f64()
            .iter()
            .map(|&v| v as f32)
            .collect(),
    )
    .unwrap();
    got.check_close(&want[0], 1e-5, 1e-6).unwrap();
    let report = dev.report();
    assert_eq!(report.launches.len(), 2);
    // The intermediate lives in SRAM: written there by the first kernel, read
    // there by the second, never touching LPDDR.
    assert_eq!(report.launches[0].bytes.sram_write, (m * n * 4) as u64);
    assert_eq!(report.launches[1].bytes.sram_read, (m * n * 4) as u64);
    assert_eq!(report.launches[1].bytes.lpddr_read, 0);
    assert_eq!(
        report.cycles(),
        report.launches[0].cycles + report.launches[1].cycles
    );
    let text = report.to_string();
    assert!(
        text.contains("vector_add") && text.contains("total (2 launches)"),
        "{text}"
    );
}

#[test]
fn the_report_reads_well() {
    let k = example("vector_add");
    let n = 64 * 1024;
    let mut args = [
        KernelArg::Buffer(random(&[n], 1)),
        KernelArg::Buffer(random(&[n], 2)),
        KernelArg::Buffer(zeros(&[n])),
        KernelArg::Int(n as i64),
    ];
    let report = sim::run(&Machine::mtia2i(), &k, [64, 1, 1], &mut args).unwrap();
    let text = report.to_string();
    for needle in [
        "kernel `vector_add` on mtia2i: grid [64, 1, 1] = 64 programs over 64 PEs",
        "LPDDR    786.43 kB  (read 524.29 kB, write 262.14 kB;",
        "SRAM     0 B",
        "PE busy     min",
        "PE busy % by grid row:",
    ] {
        assert!(text.contains(needle), "missing `{needle}` in\n{text}");
    }
    // One program per PE: every PE is busy for the whole launch but its overhead.
    let util = report.pe_utilization();
    assert_eq!(util.len(), 64);
    let busy = report.cycles - report.launch_cycles;
    for (u, b) in util.iter().zip(&report.pe_busy_cycles) {
        assert!(b.abs_diff(busy) <= 1, "{b} vs {busy}");
        assert!((u - busy as f64 / report.cycles as f64).abs() < 1e-3, "{u}");
    }
    println!("{text}");
}

// ---- runtime errors ----

fn run_err(src: &str, grid: [usize; 3], args: &mut [KernelArg]) -> String {
    let k = kernel(src);
    match sim::run(&Machine::mtia2i(), &k, grid, args) {
        Ok(_) => panic!("the launch succeeded"),
        Err(e) => e.to_string(),
    }
}

const COPY: &str = "kernel copy(x: *f32, y: *f32, n: i32) {
  offs = program_id(0) * 4 + arange(0, 4)
  store(y + offs, load(x + offs))
}
";

#[test]
fn an_unmasked_lane_out_of_bounds_names_kernel_program_and_access() {
    let mut args = [
        KernelArg::Buffer(zeros(&[6])),
        KernelArg::Buffer(zeros(&[8])),
        KernelArg::Int(6),
    ];
    let e = run_err(COPY, [2, 1, 1], &mut args);
    assert_eq!(
        e,
        "kernel `copy`, program (1, 0, 0): out-of-bounds read: `load(x + offs)` at \
         test.tile:3:19: lane [2] points at element 6 of `x`, which has 6 elements \
         (mask that lane off)"
    );
    // Program 0 ran and stored before program 1 faulted.
    assert_eq!(buffer(&args, 1).to_f64()[..4], [0.0; 4]);
    let mut args = [
        KernelArg::Buffer(zeros(&[8])),
        KernelArg::Buffer(zeros(&[6])),
        KernelArg::Int(6),
    ];
    let e = run_err(COPY, [2, 1, 1], &mut args);
    assert!(
        e.starts_with("kernel `copy`, program (1, 0, 0): out-of-bounds write: `store(y + offs, load(x + offs))`"),
        "{e}"
    );
    // Negative offsets are out of bounds too, also for a 2-D tile.
    let e = run_err(
        "kernel k(x: *f32) {\n  v = load(x + arange(0, 2)[:, None] * 2 - arange(0, 2)[None, :])\n}\n",
        [1, 1, 1],
        &mut [KernelArg::Buffer(zeros(&[4]))],
    );
    assert!(e.contains("lane [0, 1] points at element -1 of `x`"), "{e}");
}

#[test]
fn local_memory_overflow_is_reported_before_anything_runs() {
    let e = run_err(
        "kernel big(x: *f32) {\n  a = local_alloc((256, 256), f32)\n  b = local_alloc((160, 256))\n}\n",
        [1, 1, 1],
        &mut [KernelArg::Buffer(zeros(&[1]))],
    );
    assert_eq!(
        e,
        "kernel `big`: local memory overflow: each program reserves 425984 bytes but a PE \
         has 393216\n  local_alloc((256, 256), f32) (262144 bytes) at test.tile:2:7\n  \
         local_alloc((160, 256)) (163840 bytes) at test.tile:3:7"
    );
}

#[test]
fn reading_a_dma_buffer_before_dma_wait_is_an_error() {
    let src = "kernel k(x: *f32) {
  buf = local_alloc((4,), f32)
  t = dma_async(buf, x + arange(0, 4))
  v = local_load(buf)
}
";
    let e = run_err(src, [1, 1, 1], &mut [KernelArg::Buffer(zeros(&[4]))]);
    assert_eq!(
        e,
        "kernel `k`, program (0, 0, 0): `local_load(buf)` at test.tile:4:7 reads \
         `local_alloc((4,), f32)` (test.tile:2:9) before the copy into it has been waited \
         for; call dma_wait on the token of its dma_async first"
    );
    let never = "kernel k(x: *f32) {\n  buf = local_alloc((4,), f32)\n  v = local_load(buf)\n}\n";
    let e = run_err(never, [1, 1, 1], &mut [KernelArg::Buffer(zeros(&[4]))]);
    assert!(e.contains("which no dma_async has filled yet"), "{e}");
    let twice = "kernel k(x: *f32) {
  buf = local_alloc((4,), f32)
  t = dma_async(buf, x + arange(0, 4))
  u = dma_async(buf, x + arange(0, 4))
}
";
    let e = run_err(twice, [1, 1, 1], &mut [KernelArg::Buffer(zeros(&[4]))]);
    assert!(
        e.contains("while an earlier copy into it is still in flight"),
        "{e}"
    );
}

#[test]
fn bad_launches_are_rejected() {
    let k = kernel(COPY);
    let m = Machine::mtia2i();
    let e = |grid, args: &mut [KernelArg]| sim::run(&m, &k, grid, args).unwrap_err().to_string();
    let good = || {
        vec![
            KernelArg::Buffer(zeros(&[8])),
            KernelArg::Buffer(zeros(&[8])),
            KernelArg::Int(8),
        ]
    };
    assert_eq!(
        e([0, 1, 1], &mut good()),
        "kernel `copy`: bad launch: grid [0, 1, 1] has no programs; every axis must be at least 1"
    );
    assert_eq!(
        e([1, 1, 1], &mut good()[..2].to_vec()),
        "kernel `copy`: bad launch: the kernel takes 3 arguments (x, y, n), got 2"
    );
    let mut wrong_dtype = good();
    wrong_dtype[0] = KernelArg::Buffer(Tensor::zeros(
        &TensorType::new(DType::F16, vec![8]).unwrap(),
    ));
    assert_eq!(
        e([1, 1, 1], &mut wrong_dtype),
        "kernel `copy`: bad launch: argument `x` is declared *f32 but buffer `x` holds f16[8]"
    );
    let mut scalar_for_pointer = good();
    scalar_for_pointer[1] = KernelArg::Int(3);
    assert!(e([1, 1, 1], &mut scalar_for_pointer)
        .contains("argument `y` is a pointer (*f32) and needs a buffer"));
    let mut float_for_int = good();
    float_for_int[2] = KernelArg::Float(2.5);
    assert!(e([1, 1, 1], &mut float_for_int).contains("argument `n` is i32 but got the float 2.5"));
    let mut too_big = good();
    too_big[2] = KernelArg::Int(1 << 40);
    assert!(e([1, 1, 1], &mut too_big).contains("does not fit"));
    assert!(e([1 << 20, 1 << 20, 1], &mut good()).contains("more than the simulator's limit"));
}

#[test]
fn arithmetic_faults_and_runaway_loops_are_errors() {
    let div = "kernel k(x: *i32, d: i32) {\n  o = arange(0, 4)\n  store(x + o, o / d)\n}\n";
    let args = || {
        vec![
            KernelArg::Buffer(Tensor::zeros(
                &TensorType::new(DType::I32, vec![4]).unwrap(),
            )),
            KernelArg::Int(0),
        ]
    };
    assert_eq!(
        run_err(div, [1, 1, 1], &mut args()),
        "kernel `k`, program (0, 0, 0): integer division by zero"
    );
    let step = "kernel k(x: *i32, d: i32) {\n  for i in range(0, 4, d) {\n  }\n}\n";
    assert!(run_err(step, [1, 1, 1], &mut args()).ends_with("range step is 0"));
    let long = "kernel k(x: *i32, d: i32) {\n  for i in range(0, 2000000000) {\n  }\n}\n";
    assert!(run_err(long, [1, 1, 1], &mut args()).contains("more than the simulator's limit"));
}

#[test]
fn a_failed_check_names_its_reason_the_check_and_the_lane() {
    // Lanes the mask switches off are not checked: the value 4 at lane 3 is fine.
    let src = "kernel k(x: *i32, n: i32) {
  o = arange(0, 4)
  m = o < n
  v = load(x + o, m)
  # values must stay below 4
  check(v < 4, m)
  store(x + o, v + 1, m)
}
";
    let x = Tensor::from_i64(
        &TensorType::new(DType::I32, vec![4]).unwrap(),
        &[1, 2, 3, 4],
    );
    let mut args = [KernelArg::Buffer(x.clone()), KernelArg::Int(3)];
    sim::run(&Machine::mtia2i(), &kernel(src), [1, 1, 1], &mut args).unwrap();
    assert_eq!(buffer(&args, 0).to_i64(), [2, 3, 4, 4]);
    let mut args = [KernelArg::Buffer(x), KernelArg::Int(4)];
    assert_eq!(
        run_err(src, [1, 1, 1], &mut args),
        "kernel `k`, program (0, 0, 0): values must stay below 4: `check(v < 4, m)` at \
         test.tile:6:3 failed in lane [3]"
    );
    // Without a comment above it, a check is named by its text; a scalar condition
    // fails as a whole.
    let bare = "kernel k(x: *i32) {\n  check(program_id(0) < 1)\n}\n";
    let mut args = [KernelArg::Buffer(Tensor::zeros(
        &TensorType::new(DType::I32, vec![1]).unwrap(),
    ))];
    assert_eq!(
        run_err(bare, [2, 1, 1], &mut args),
        "kernel `k`, program (1, 0, 0): `check(program_id(0) < 1)` at test.tile:2:3 failed in \
         lane []"
    );
}

#[test]
fn pow_follows_the_interpreter_special_values_included() {
    let src = "kernel k(x: *f32, y: *f32, z: *f32) {
  o = arange(0, 8)
  store(z + o, pow(load(x + o), load(y + o)))
}
";
    let ty = TensorType::new(DType::F32, vec![8]).unwrap();
    let inf = f64::INFINITY;
    let x = Tensor::from_f64(&ty, &[-0.0, -inf, -1.0, 2.0, f64::NAN, 1.0, -8.0, 10.0]);
    let y = Tensor::from_f64(
        &ty,
        &[-1.0, 0.5, inf, 100.0, 0.0, f64::NAN, 1.0 / 3.0, 10.0],
    );
    let mut args = [
        KernelArg::Buffer(x.clone()),
        KernelArg::Buffer(y.clone()),
        KernelArg::Buffer(Tensor::zeros(&ty)),
    ];
    sim::run(&Machine::mtia2i(), &kernel(src), [1, 1, 1], &mut args).unwrap();
    let want = reference(
        "graph g(x: f32[8], y: f32[8]) {\n  z = pow(x, y)\n  return z\n}\n",
        &[x, y],
    );
    let (got, want) = (buffer(&args, 2).to_f64(), want[0].to_f64());
    for (a, b) in got.iter().zip(&want) {
        assert!(
            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
            "{got:?} {want:?}"
        );
    }
    assert_eq!(want[..4], [f64::NEG_INFINITY, inf, 1.0, 2f64.powi(100)]);
}

#[test]
fn device_errors() {
    let mut dev = sim::Device::new(Machine::mtia2i());
    let x = dev.upload("x", &zeros(&[4]), Placement::Lpddr).unwrap();
    let again = dev.upload("x", &zeros(&[4]), Placement::Lpddr).unwrap_err();
    assert_eq!(
        again.to_string(),
        "device: a buffer named `x` already exists"
    );
    let huge = TensorType::new(DType::F32, vec![1 << 27]).unwrap();
    let e = dev.alloc("huge", &huge, Placement::Sram).unwrap_err();
    assert!(e.to_string().contains("does not fit in SRAM"), "{e}");
    dev.free(x).unwrap();
    assert!(matches!(dev.read(x), Err(SimError::Device { .. })));
    assert_eq!(dev.find("x"), None);
}

/// Reliability finding F08: the per-loop and per-grid guards multiplied, so a kernel could
/// keep the simulator busy for hours. Every launch now spends from a budget of work
/// units, and a launch that exhausts it stops with `SimError::Budget`.
#[test]
fn the_simulation_budget_stops_unbounded_kernels() {
    let nested = kernel(
        "kernel k(out: *f32) {\n  acc = 0\n  for i in range(0, 16777216) {\n    for j in range(0, 16777216) {\n      acc = acc + 1\n    }\n  }\n  store(out, cast(acc, f32))\n}\n",
    );
    let mut dev = sim::Device::new(Machine::mtia2i());
    dev.limit_work(1 << 20, 1 << 30);
    let out = one_float_out(&mut dev);
    let err = dev
        .launch(&nested, [1, 1, 1], &[DeviceArg::Buffer(out)])
        .unwrap_err();
    assert!(
        matches!(err, SimError::Budget { limit, .. } if limit == 1 << 20),
        "{err}"
    );
    assert!(err.to_string().contains("budget"), "{err}");
    assert!(dev.work_spent() > 1 << 20);
    // A grid of many cheap programs spends the budget too.
    let store = kernel("kernel k(out: *f32) {\n  store(out, 1.0)\n}\n");
    let err = dev
        .launch(&store, [1 << 20, 1, 1], &[DeviceArg::Buffer(out)])
        .unwrap_err();
    assert!(matches!(err, SimError::Budget { .. }), "{err}");
    // What is left of the device's total bounds every later launch.
    dev.limit_work(1 << 20, dev.work_spent() + 100);
    let err = dev
        .launch(&store, [1, 1, 1], &[DeviceArg::Buffer(out)])
        .unwrap_err();
    assert!(matches!(err, SimError::Budget { limit: 100, .. }), "{err}");
    // An ordinary kernel runs well within the default budget.
    let mut fresh = sim::Device::new(Machine::mtia2i());
    let out = one_float_out(&mut fresh);
    fresh
        .launch(&store, [64, 1, 1], &[DeviceArg::Buffer(out)])
        .unwrap();
}

/// F08's last case: scalar steps are charged what they cost the simulator, so a grid of
/// many programs each running a scalar loop exhausts the device's budget in seconds, not
/// minutes (2^24 programs of 4096 iterations of `acc = acc + 1`: 94 s at 64 units a step,
/// 12 s at 512 on the 2-core machine). Each iteration is five steps (the loop's, the
/// statement's and three expressions').
#[test]
fn scalar_loop_steps_cost_what_they_take_to_simulate() {
    let looped = kernel(
        "kernel k(out: *f32) {\n  acc = 0\n  for i in range(0, 1000) {\n    acc = acc + 1\n  }\n  store(out, cast(acc, f32))\n}\n",
    );
    let mut dev = sim::Device::new(Machine::mtia2i());
    let out = one_float_out(&mut dev);
    dev.launch(&looped, [1, 1, 1], &[DeviceArg::Buffer(out)])
        .unwrap();
    const { assert!(sim::STEP_COST >= 256) };
    assert!(
        dev.work_spent() >= 1000 * 5 * sim::STEP_COST,
        "{} units for 1000 iterations",
        dev.work_spent()
    );
    // At that price the whole device budget is at most this many scalar iterations.
    const { assert!(sim::MAX_WORK_PER_DEVICE / (5 * sim::STEP_COST) <= 1 << 25) };
}

/// A launch's budget grows with its grid: 2^32 work units up to 256 programs, 2^24 per
/// program past that (a GEMM of 16384 rows by 1024 columns is 2048 programs and about
/// 6.4 * 10^9 units, legitimately), and no launch more than the device's 2^36.
#[test]
fn a_launch_budget_grows_with_its_grid() {
    assert_eq!(sim::launch_budget(1), sim::MAX_WORK_PER_LAUNCH);
    assert_eq!(sim::launch_budget(256), 1 << 32);
    assert_eq!(sim::launch_budget(2048), 1 << 35);
    assert_eq!(sim::launch_budget(usize::MAX), u64::MAX);
    assert_eq!(sim::MAX_WORK_PER_DEVICE, 1 << 36);
    // A budget set on the device still caps a large grid's.
    let store = kernel("kernel k(out: *f32) {\n  store(out, 1.0)\n}\n");
    let mut dev = sim::Device::new(Machine::mtia2i());
    dev.limit_work(1 << 16, 1 << 30);
    let out = one_float_out(&mut dev);
    let err = dev
        .launch(&store, [4096, 1, 1], &[DeviceArg::Buffer(out)])
        .unwrap_err();
    assert!(
        matches!(err, SimError::Budget { limit, .. } if limit == 1 << 16),
        "{err}"
    );
}

/// Reliability finding F09: the simulator keeps 8 bytes per element, so a 4 GiB f32
/// buffer needed an 8 GiB working copy and aborted; buffers are now bounded together
/// before anything is allocated.
#[test]
fn device_buffers_are_bounded_together() {
    let mut dev = sim::Device::new(Machine::mtia2i());
    let big = TensorType::new(DType::F32, vec![1 << 29]).unwrap(); // 4 GiB as f64
    let err = dev
        .alloc(
            "a",
            &TensorType::new(DType::F32, vec![(1 << 29) + 1]).unwrap(),
            Placement::Lpddr,
        )
        .unwrap_err();
    assert!(
        err.to_string().contains("limit of 4294967296 bytes"),
        "{err}"
    );
    let half = TensorType::new(DType::F32, vec![1 << 28]).unwrap();
    dev.alloc("b", &half, Placement::Lpddr).unwrap();
    let err = dev.alloc("c", &big, Placement::Lpddr).unwrap_err();
    assert!(err.to_string().contains("other buffers take"), "{err}");
}
