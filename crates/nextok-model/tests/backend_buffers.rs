//! `LlamaModel::forward` reaches activations only through the [`Backend`]'s buffer operations:
//! a backend whose buffers the model crate cannot read (kept as opaque device handles) runs the
//! whole pass and gives the CPU backend's bits. This is the contract a device backend (CUDA)
//! relies on to keep every activation and the KV cache where it computes.

use std::ops::Range;

use nextok_gguf::GgufFile;
use nextok_kv_cache::{KvCache, KvType};
use nextok_model::testing::RandomLlama;
use nextok_model::{
    Backend, Buffer, CpuBackend, Error, LlamaModel, LoadOptions, Logits, Mask, QMatrix, Rotary,
    Sequence,
};

/// The numbers of an [`Opaque`] buffer: a vector that only [`Opaque`] knows how to reach.
struct Hidden(Vec<f32>);

/// The CPU backend behind buffers that are not host buffers: every operation unwraps its
/// operands, runs the CPU backend's own operation, and wraps the results again. A forward pass
/// that read or wrote a buffer's numbers itself would fail on it.
struct Opaque(CpuBackend);

fn hide(b: Buffer) -> Buffer {
    let len = b.len();
    let v = b.into_host().expect("the CPU backend makes host buffers");
    Buffer::device(len, Box::new(Hidden(v)))
}

fn show(b: &Buffer) -> Result<Buffer, Error> {
    let h = b.device_handle::<Hidden>().ok_or(Error::ForeignBuffer {
        what: "opaque test backend",
        len: b.len(),
    })?;
    Ok(Buffer::host(h.0.clone()))
}

/// Runs `f` on host copies of `outs`, then writes the results back into the opaque buffers.
fn through(
    outs: &mut [&mut Buffer],
    f: impl FnOnce(&mut [&mut Buffer]) -> Result<(), Error>,
) -> Result<(), Error> {
    let mut host: Vec<Buffer> = outs.iter().map(|b| show(b)).collect::<Result<_, _>>()?;
    let mut refs: Vec<&mut Buffer> = host.iter_mut().collect();
    f(&mut refs)?;
    for (o, h) in outs.iter_mut().zip(host) {
        **o = hide(h);
    }
    Ok(())
}

impl Backend for Opaque {
    fn matmul(&self, w: QMatrix<'_>, x: &[f32], t: usize, out: &mut [f32]) -> Result<(), Error> {
        self.0.matmul(w, x, t, out)
    }
    fn attention(
        &self,
        q: &[f32],
        cache: &KvCache,
        layer: usize,
        mask: Mask,
        heads: usize,
        out: &mut [f32],
    ) -> Result<(), Error> {
        self.0.attention(q, cache, layer, mask, heads, out)
    }
    fn alloc(&self, len: usize) -> Result<Buffer, Error> {
        Ok(hide(self.0.alloc(len)?))
    }
    fn upload(&self, numbers: Vec<f32>) -> Result<Buffer, Error> {
        Ok(hide(self.0.upload(numbers)?))
    }
    fn download(&self, buffer: Buffer) -> Result<Vec<f32>, Error> {
        self.0.download(show(&buffer)?)
    }
    fn embed(&self, table: QMatrix<'_>, tokens: &[u32], out: &mut Buffer) -> Result<(), Error> {
        through(&mut [out], |o| self.0.embed(table, tokens, o[0]))
    }
    fn rms_norm(&self, x: &Buffer, w: &[f32], eps: f32, out: &mut Buffer) -> Result<(), Error> {
        let x = show(x)?;
        through(&mut [out], |o| self.0.rms_norm(&x, w, eps, o[0]))
    }
    fn rms_norm_rows(
        &self,
        x: &Buffer,
        rows: &[usize],
        w: &[f32],
        eps: f32,
        out: &mut Buffer,
    ) -> Result<(), Error> {
        let x = show(x)?;
        through(&mut [out], |o| self.0.rms_norm_rows(&x, rows, w, eps, o[0]))
    }
    fn add_bias(&self, x: &mut Buffer, bias: &[f32]) -> Result<(), Error> {
        through(&mut [x], |o| self.0.add_bias(o[0], bias))
    }
    fn add(&self, x: &mut Buffer, y: &Buffer) -> Result<(), Error> {
        let y = show(y)?;
        through(&mut [x], |o| self.0.add(o[0], &y))
    }
    fn rope(&self, x: &mut Buffer, table: &Buffer, rotary: Rotary) -> Result<(), Error> {
        let table = show(table)?;
        through(&mut [x], |o| self.0.rope(o[0], &table, rotary))
    }
    fn project(&self, w: QMatrix<'_>, x: &Buffer, t: usize, out: &mut Buffer) -> Result<(), Error> {
        let x = show(x)?;
        through(&mut [out], |o| self.0.project(w, &x, t, o[0]))
    }
    fn project_many(
        &self,
        ws: &[QMatrix<'_>],
        x: &Buffer,
        t: usize,
        outs: &mut [&mut Buffer],
    ) -> Result<(), Error> {
        let x = show(x)?;
        through(outs, |o| self.0.project_many(ws, &x, t, o))
    }
    fn project_swiglu(
        &self,
        gate: QMatrix<'_>,
        up: QMatrix<'_>,
        x: &Buffer,
        t: usize,
        gate_out: &mut Buffer,
        up_out: &mut Buffer,
    ) -> Result<(), Error> {
        let x = show(x)?;
        through(&mut [gate_out, up_out], |o| {
            let [g, u] = o else { unreachable!() };
            self.0.project_swiglu(gate, up, &x, t, g, u)
        })
    }
    fn write_kv(
        &self,
        cache: &mut KvCache,
        layer: usize,
        first: usize,
        keys: &Buffer,
        values: &Buffer,
        rows: Range<usize>,
    ) -> Result<(), Error> {
        let (k, v) = (show(keys)?, show(values)?);
        self.0.write_kv(cache, layer, first, &k, &v, rows)
    }
    fn attend(
        &self,
        q: &Buffer,
        rows: Range<usize>,
        cache: &KvCache,
        layer: usize,
        mask: Mask,
        heads: usize,
        out: &mut Buffer,
    ) -> Result<(), Error> {
        let q = show(q)?;
        through(&mut [out], |o| {
            self.0.attend(&q, rows, cache, layer, mask, heads, o[0])
        })
    }
}

fn model(spec: RandomLlama, seed: u64) -> LlamaModel {
    let file = GgufFile::from_bytes(spec.to_gguf(seed)).expect("random model");
    LlamaModel::from_gguf(file, LoadOptions::default()).expect("loads")
}

/// A prompt, then two decode steps of a batch of two sequences, one of them asking for every
/// position's logits: all logits, in order.
fn run(model: &LlamaModel, backend: &dyn Backend) -> Vec<Vec<f32>> {
    let mut a = model.new_cache(KvType::F32);
    let mut b = model.new_cache(KvType::F32);
    let mut all = Vec::new();
    let prompt = [
        Sequence {
            cache: &mut a,
            tokens: &[1, 5, 9, 2, 7],
            logits: Logits::Last,
        },
        Sequence {
            cache: &mut b,
            tokens: &[3, 3, 8],
            logits: Logits::All,
        },
    ];
    all.extend(model.forward(backend, &mut { prompt }).expect("prefill"));
    for step in 0..2u32 {
        let mut batch = [
            Sequence {
                cache: &mut a,
                tokens: &[4 + step],
                logits: Logits::Last,
            },
            Sequence {
                cache: &mut b,
                tokens: &[6, step],
                logits: Logits::All,
            },
        ];
        all.extend(model.forward(backend, &mut batch).expect("decode"));
    }
    all
}

#[test]
fn a_backend_with_opaque_buffers_gives_the_cpu_bits() {
    // Biases on Q, K and V (Qwen2's) and an untied output, so that every operation runs.
    let spec = RandomLlama {
        layers: 2,
        attention_bias: true,
        tied_output: false,
        ..RandomLlama::default()
    };
    let model = model(spec, 5);
    let on_cpu = run(&model, &CpuBackend::new(2));
    let opaque = run(&model, &Opaque(CpuBackend::new(2)));
    assert_eq!(on_cpu.len(), 6);
    assert!(on_cpu.iter().all(|l| !l.is_empty()));
    for (i, (a, b)) in on_cpu.iter().zip(&opaque).enumerate() {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(a), bits(b), "logits {i}");
    }
}

#[test]
fn the_cpu_backend_refuses_a_buffer_it_did_not_make() {
    let cpu = CpuBackend::new(1);
    let foreign = Buffer::device(4, Box::new(Hidden(vec![0.0; 4])));
    let mut out = cpu.alloc(4).expect("alloc");
    assert!(matches!(
        cpu.add(&mut out, &foreign),
        Err(Error::ForeignBuffer { len: 4, .. })
    ));
    assert!(matches!(
        cpu.download(foreign),
        Err(Error::ForeignBuffer {
            what: "download",
            len: 4
        })
    ));
    // Host buffers too short for the operation are refused the same way, not a panic.
    let (k, v) = (cpu.alloc(2).expect("alloc"), cpu.alloc(2).expect("alloc"));
    let model = model(RandomLlama::default(), 1);
    let mut cache = model.new_cache(KvType::F32);
    cache.push_tokens(&[1]).expect("room");
    assert!(matches!(
        cpu.write_kv(&mut cache, 0, 0, &k, &v, 0..1),
        Err(Error::ForeignBuffer { .. })
    ));
}
