
pub mod cpu;
pub mod accel;
pub mod profile;
