//! Calibration of the timing model against its own roofline: a large
//! memory-bound copy runs at the LPDDR bandwidth, a large tiled matmul at close to
//! the dot engine's peak, and asynchronous DMA overlaps what synchronous loads add.

use ferrite_accel::sim::{Device, DeviceArg, Machine, Placement};
use ferrite_accel::tile::{self, CheckedKernel};
use ferrite_ir::{DType, SplitMix64, Tensor, TensorType};

fn kernel(src: &str) -> CheckedKernel {
    tile::parse_and_check("calibration.tile", src).unwrap_or_else(|d| panic!("{d}"))
}

fn random(shape: &[usize], seed: u64) -> Tensor {
    Tensor::random(&TensorType::new(DType::F32, shape.to_vec()).unwrap(), seed)
}

fn zeros(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F32, shape.to_vec()).unwrap()
}

#[test]
fn a_large_copy_runs_at_the_lpddr_bandwidth() {
    let copy = kernel(
        "kernel copy(x: *f32, y: *f32) {
  const BLOCK = 4096
  offs = program_id(0) * BLOCK + arange(0, BLOCK)
  store(y + offs, load(x + offs))
}
",
    );
    let n = 4 << 20;
    let machine = Machine::mtia2i();
    let mut dev = Device::new(machine.clone());
    let x = dev.upload("x", &random(&[n], 1), Placement::Lpddr).unwrap();
    let y = dev.alloc("y", &zeros(&[n]), Placement::Lpddr).unwrap();
    let report = dev
        .launch(
            &copy,
            [n / 4096, 1, 1],
            &[DeviceArg::Buffer(x), DeviceArg::Buffer(y)],
        )
        .unwrap();
    println!("{report}");
    assert_eq!(dev.read(y).unwrap(), dev.read(x).unwrap());
    let bytes = 2 * 4 * n as u64;
    assert_eq!(report.bytes.lpddr(), bytes);
    let ideal = bytes as f64 / (machine.lpddr_bandwidth_gbps * 1e9);
    let ratio = report.seconds() / ideal;
    assert!(
        (1.0..1.10).contains(&ratio),
        "copy took {:.2}x bytes / bandwidth\n{report}",
        ratio
    );
}

#[test]
fn a_large_tiled_matmul_approaches_the_dot_peak() {
    // f32 operands resident in SRAM, 128 x 128 output blocks (one wave of 64
    // programs), K streamed through local memory one slice ahead.
    let mm = kernel(
        "kernel mm(a: *f32, b: *f32, c: *f32, k: i32, n: i32) {
  const BM = 128
  const BN = 128
  const BK = 64
  rm = program_id(0) * BM + arange(0, BM)
  rn = program_id(1) * BN + arange(0, BN)
  rk = arange(0, BK)
  a_ptrs = a + rm[:, None] * k + rk[None, :]
  b_ptrs = b + rk[:, None] * n + rn[None, :]
  a_buf = local_alloc((BM, BK))
  b_buf = local_alloc((BK, BN))
  ta = dma_async(a_buf, a_ptrs)
  tb = dma_async(b_buf, b_ptrs)
  acc = zeros((BM, BN))
  for k0 in range(BK, k + BK, BK) {
    dma_wait(ta)
    dma_wait(tb)
    x = local_load(a_buf)
    y = local_load(b_buf)
    more = k0 < k
    ta = dma_async(a_buf, a_ptrs + k0, more)
    tb = dma_async(b_buf, b_ptrs + k0 * n, more)
    acc = dot(x, y, acc)
  }
  store(c + rm[:, None] * n + rn[None, :], acc)
}
",
    );
    let (m, n, k) = (1024, 1024, 1024);
    let (a, b) = (random(&[m, k], 2), random(&[k, n], 3));
    let mut dev = Device::new(Machine::mtia2i());
    let ab = dev.upload("a", &a, Placement::Sram).unwrap();
    let bb = dev.upload("b", &b, Placement::Sram).unwrap();
    let cb = dev.alloc("c", &zeros(&[m, n]), Placement::Sram).unwrap();
    let args = [
        DeviceArg::Buffer(ab),
        DeviceArg::Buffer(bb),
        DeviceArg::Buffer(cb),
        DeviceArg::Int(k as i64),
        DeviceArg::Int(n as i64),
    ];
    let report = dev.launch(&mm, [m / 128, n / 128, 1], &args).unwrap();
    println!("{report}");
    assert_eq!(report.dot_flops, 2 * (m * n * k) as u64);
    let efficiency = report.dot_efficiency();
    assert!(
        efficiency > 0.85 && efficiency <= 1.0,
        "dot efficiency {:.1}%\n{report}",
        efficiency * 100.0
    );
    // Spot-check the product against an f64 dot of the same row and column.
    let c = dev.read(cb).unwrap().to_f64();
    let (av, bv) = (a.to_f64(), b.to_f64());
    let mut rng = SplitMix64(4);
    for _ in 0..64 {
        let (i, j) = (
            (rng.next() % m as u64) as usize,
            (rng.next() % n as u64) as usize,
        );
        let want: f64 = (0..k).map(|kk| av[i * k + kk] * bv[kk * n + j]).sum();
        assert!(
            (c[i * n + j] - want).abs() < 1e-3,
            "c[{i}, {j}] = {} vs {want}",
            c[i * n + j]
        );
    }
}

#[test]
fn async_dma_overlaps_compute_and_synchronous_loads_do_not() {
    // The same work twice, on every PE: stream 16 slices of x and do vector work
    // on each. Synchronous loads add their time to the compute; prefetching the
    // next slice with DMA hides the compute under the transfers.
    let sync = kernel(
        "kernel sync(x: *f32, y: *f32) {
  o = arange(0, 4096)
  base = program_id(0) * 16 * 4096
  acc = zeros((4096,))
  for i in range(0, 16) {
    v = load(x + base + i * 4096 + o)
    acc = exp(exp(exp(exp(acc + v))))
  }
  store(y + program_id(0) * 4096 + o, acc)
}
",
    );
    let overlapped = kernel(
        "kernel overlapped(x: *f32, y: *f32) {
  o = arange(0, 4096)
  base = program_id(0) * 16 * 4096
  buf = local_alloc((4096,))
  t = dma_async(buf, x + base + o)
  acc = zeros((4096,))
  for i in range(1, 17) {
    dma_wait(t)
    v = local_load(buf)
    t = dma_async(buf, x + base + i * 4096 + o, i < 16)
    acc = exp(exp(exp(exp(acc + v))))
  }
  store(y + program_id(0) * 4096 + o, acc)
}
",
    );
    let x = random(&[64 * 16 * 4096], 5);
    let time = |k: &CheckedKernel| {
        let mut dev = Device::new(Machine::mtia2i());
        let xb = dev.upload("x", &x, Placement::Lpddr).unwrap();
        let yb = dev
            .alloc("y", &zeros(&[64 * 4096]), Placement::Lpddr)
            .unwrap();
        let r = dev
            .launch(
                k,
                [64, 1, 1],
                &[DeviceArg::Buffer(xb), DeviceArg::Buffer(yb)],
            )
            .unwrap();
        (r.cycles - r.launch_cycles, dev.read(yb).unwrap())
    };
    let ((ts, ys), (to, yo)) = (time(&sync), time(&overlapped));
    println!("sync {ts} cycles, overlapped {to} cycles");
    assert_eq!(ys, yo, "both kernels compute the same values");
    // 64 PEs share the LPDDR bandwidth: a 16 KiB slice takes 16384 / 2.37 cycles.
    let m = Machine::mtia2i();
    let share = m.lpddr_bandwidth_gbps / m.clock_ghz / 64.0;
    let load = (16384.0 / share) as u64;
    let compute = 5 * 4096 / 32; // add + 4 exp per slice at 32 f32 lanes a cycle
    assert!(ts >= 16 * (load + compute), "sync {ts}");
    assert!(to >= 16 * load, "overlapped {to}");
    assert!(
        to + 15 * compute * 9 / 10 < ts,
        "overlapped {to} should hide the compute of 15 slices of sync {ts}"
    );
}
