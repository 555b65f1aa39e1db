//! A decode step writes one key and value row per layer into a block that is already the
//! sequence's: that write must not allocate (it runs layers × tokens times per second). The
//! allocator of this test binary counts the calling thread's allocations.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use nextok_kv_cache::{CacheConfig, KvCache, KvType};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded to the system allocator unchanged; the count is a side effect.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // `try_with`: a thread being torn down has no counter left, and that is no test's concern.
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn allocations_in(f: impl FnOnce()) -> usize {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

#[test]
fn a_decode_steps_row_writes_allocate_nothing() {
    let (layers, kv_heads, head_dim) = (3, 2, 4);
    for kv_type in [KvType::F32, KvType::F16, KvType::BF16] {
        let config = CacheConfig::new(layers, kv_heads, head_dim, kv_type).with_block_positions(4);
        let mut cache = KvCache::new(config).expect("a valid configuration");
        cache.push_tokens(&[1, 2, 3]).expect("blocks for a prompt");
        let key: Vec<f32> = (0..kv_heads * head_dim).map(|i| i as f32 + 0.5).collect();
        let value: Vec<f32> = key.iter().map(|k| -k).collect();
        // The prompt's rows, and one decode step that stays in the prompt's block.
        for pos in 0..3 {
            for layer in 0..layers {
                cache.write(layer, pos, &key, &value).expect("a prompt row");
            }
        }
        cache.push_tokens(&[4]).expect("a decode position");
        let n = allocations_in(|| {
            for layer in 0..layers {
                cache.write(layer, 3, &key, &value).expect("a decode row");
            }
        });
        assert_eq!(
            n, 0,
            "{kv_type:?}: a decode step's row writes allocated {n} times"
        );
        // The rows are where they belong, rounded to the cache's number type.
        for layer in 0..layers {
            let k = cache.key(layer, 3).expect("a written key");
            let v = cache.value(layer, 3).expect("a written value");
            assert_eq!(k.get(1), Some(1.5), "{kv_type:?}: key of layer {layer}");
            assert_eq!(v.get(1), Some(-1.5), "{kv_type:?}: value of layer {layer}");
        }
        // A write of several rows still works (it may allocate: prefill, not a decode step).
        cache.push_tokens(&[5, 6]).expect("two more positions");
        cache
            .write_rows(0, 4..6, |storage, places| {
                assert_eq!(places.len(), 2);
                places
                    .iter()
                    .try_for_each(|p| storage.write(p.block, 0, p.slot, &key, &value))
            })
            .expect("a bulk write");
        assert_eq!(cache.key(0, 5).expect("a written key").get(0), Some(0.5));
    }
}
