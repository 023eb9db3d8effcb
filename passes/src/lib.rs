pub mod autodiff;
pub mod decompose;
pub mod donate;
pub mod dot;
pub mod error;
pub mod fold;
pub mod fuse;
pub mod index_checks;
pub mod lower;
pub mod memory;
pub mod optimize;
pub mod partition;
pub mod pipeline;
pub mod schedule;
pub mod train;

pub use error::{Error, Result};
