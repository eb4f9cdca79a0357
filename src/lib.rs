pub mod domain;
pub mod embedded_pg;
pub mod testing;
