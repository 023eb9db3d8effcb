pub mod decompose;
pub mod dot;
pub mod fuse;
pub mod lower;
pub mod memory;
pub mod optimize;
pub mod pipeline;
pub mod schedule;
