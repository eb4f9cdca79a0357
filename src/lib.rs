pub mod domain;
pub mod fake_llm;
pub mod llm;
