//! Profiles of compiled programs: where the time goes, kernel by kernel, fused and
//! unfused. What `ferrite profile` prints, for library users.
//!
//! [`Compiled::profile`](crate::Compiled::profile) measures one schedule
//! ([`ScheduleProfile`]); [`Compiled::profile_report`](crate::Compiled::profile_report)
//! measures a program and its unfused baseline against a [`Roofline`] and gives the
//! [`ProfileReport`], which renders as a table ([`render_table`]), as the documented
//! JSON report ([`to_json`], format in [`json`]) and as a Chrome trace
//! ([`chrome_trace`], for ui.perfetto.dev or chrome://tracing).
//!
//! ```
//! use ferrite::{Options, Target, Tensor};
//! let g = ferrite::Graph::new("scaled_relu");
//! let x = g.input("x", ferrite::f32(&[64, 64]));
//! g.output(&((x * 2.0).relu() + 1.0));
//! let exe = ferrite::compile(&g, &Options::default().target(Target::Sim))?;
//! let x = Tensor::random(&ferrite::f32(&[64, 64]), 0)?;
//! let report = exe.profile_report(&[&x], 1)?;
//! assert_eq!(Target::from(report.target), Target::Sim);
//! assert!(report.fused.kernels.len() < report.unfused.kernels.len());
//! assert!(ferrite::profile::render_table(&report).contains("fused vs unfused: "));
//! assert!(ferrite::profile::to_json(&report).contains("\"format\": \"ferrite-profile\""));
//! # Ok::<(), ferrite::Error>(())
//! ```

pub use super::compile::ProfileStep;
pub use ferrite_profile::json;
pub use ferrite_profile::{
    chrome_trace, machine_info, machine_roofline, measure_copy_bandwidth, render_table, to_json,
    ChunkSlice, KernelProfile, KernelTrace, MachineInfo, MemoryLevel, OpRef, ProfileReport,
    ProfileTarget, Roofline, ScheduleProfile, SimKernelDetail, FORMAT_VERSION,
};
