//! Prints the PTX that NVRTC makes of the kernels (needs only `libnvrtc`, no GPU), for reading
//! or for checking with `ptxas`: `cargo run -p nextok-cuda --example ptx > kernels.ptx`.

fn main() -> Result<(), nextok_cuda::Error> {
    print!("{}", nextok_cuda::compile_ptx()?);
    Ok(())
}
