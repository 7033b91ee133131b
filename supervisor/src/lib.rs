pub mod cli { pub fn main() {} }
