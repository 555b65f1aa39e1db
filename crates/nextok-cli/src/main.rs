//! The `nextok` command.

fn main() {
    eprintln!("nextok: not yet implemented");
    std::process::exit(1);
}
