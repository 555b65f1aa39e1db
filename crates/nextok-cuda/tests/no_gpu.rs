//! Checks that run on every machine, with or without a GPU: asking for the backend never
//! panics, and the kernel source compiles under NVRTC wherever `libnvrtc` can be loaded.

use nextok_cuda::{
    compile_ptx, driver_available, nvrtc_available, CudaBackend, Error, KERNEL_NAMES,
};

#[test]
fn asking_for_a_missing_device_is_a_typed_error() {
    // Ordinal 4096 exists on no machine: without a driver the answer is NoCuda, with one (and
    // NVRTC) it is NoDevice; in no case a panic or a backend.
    match CudaBackend::new(4096) {
        Err(Error::NoCuda { library, .. }) => {
            if driver_available() {
                assert_eq!(
                    library, "libnvrtc",
                    "the driver is present, so NVRTC must be missing"
                );
                assert!(!nvrtc_available());
            } else {
                assert_eq!(library, "libcuda");
            }
        }
        Err(Error::NoDevice { ordinal, .. }) => assert_eq!(ordinal, 4096),
        Err(e) => panic!("expected NoCuda or NoDevice, got {e}"),
        Ok(b) => panic!("device 4096 cannot exist, yet got {b:?}"),
    }
}

#[test]
fn without_a_driver_the_first_device_is_a_typed_error() {
    if driver_available() {
        eprintln!("NOTE: this machine has libcuda; the no-driver path was not exercised");
        return;
    }
    let e = CudaBackend::new(0).expect_err("no driver, yet a backend");
    assert!(
        matches!(
            e,
            Error::NoCuda {
                library: "libcuda",
                ..
            }
        ),
        "expected NoCuda for libcuda, got {e}"
    );
    assert!(e.to_string().contains("CUDA is not available"), "{e}");
}

#[test]
fn kernels_compile_with_nvrtc_when_it_is_present() {
    if !nvrtc_available() {
        // Without NVRTC, compiling is the typed error, never a panic.
        let e = compile_ptx().expect_err("no NVRTC, yet PTX");
        assert!(
            matches!(
                e,
                Error::NoCuda {
                    library: "libnvrtc",
                    ..
                }
            ),
            "{e}"
        );
        eprintln!(
            "NOTE: libnvrtc was not found, so the kernels were NOT compiled (put the folder of \
             libnvrtc.so.12 on LD_LIBRARY_PATH to run this check; see the crate README)"
        );
        return;
    }
    let ptx = compile_ptx().unwrap_or_else(|e| panic!("the kernels do not compile: {e}"));
    for name in KERNEL_NAMES {
        assert!(
            ptx.contains(&format!(".entry {name}(")),
            "the PTX has no entry point {name}"
        );
    }
    // The matrix kernels reduce across lanes with warp shuffles, and no multiply-add was
    // contracted beyond the fused ones written in the source (NVRTC ran with --fmad=false).
    assert!(ptx.contains("shfl.sync.down"), "no warp shuffle in the PTX");
    eprintln!(
        "NVRTC compiled {} kernels into {} bytes of PTX",
        KERNEL_NAMES.len(),
        ptx.len()
    );
}
