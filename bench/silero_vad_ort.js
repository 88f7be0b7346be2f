// silero_vad_ort.js — ONNX Runtime's side of bench/silero_vad.sh: the original silero_vad.onnx
// on `streams` copies of `seconds` of jfk.wav (tiled, as bench_silero_vad.c does), one thread,
// the streams as the batch dimension of each call, median of 5 runs; one JSON line per size.
// Usage: node bench/silero_vad_ort.js ONNX WAV [seconds=60] [streams=1,8,64]
// (onnxruntime-node from $HARK_ORT_DIR/node_modules, as tools/silero_vad_reference.js)
'use strict';
const fs = require('fs');
const path = require('path');
const ort = (() => {
    try { return require('onnxruntime-node'); } catch (e) {
        if (!process.env.HARK_ORT_DIR) throw e;
        return require(path.join(process.env.HARK_ORT_DIR, 'node_modules', 'onnxruntime-node'));
    }
})();

function readWav16(file) { // 16-bit PCM mono, the data chunk
    const b = fs.readFileSync(file);
    let off = 12;
    while (off + 8 <= b.length) {
        const id = b.toString('ascii', off, off + 4), len = b.readUInt32LE(off + 4);
        if (id === 'data') {
            const x = new Float32Array(len >> 1);
            for (let i = 0; i < x.length; i++) x[i] = b.readInt16LE(off + 8 + 2 * i) / 32768;
            return x;
        }
        off += 8 + len + (len & 1);
    }
    throw new Error(`${file}: no data chunk`);
}

async function main() {
    const [onnx, wav, secArg, streamsArg] = process.argv.slice(2);
    const seconds = parseFloat(secArg || '60');
    const sizes = (streamsArg || '1,8,64').split(',').map((s) => parseInt(s, 10));
    const sess = await ort.InferenceSession.create(onnx, {
        intraOpNumThreads: 1, interOpNumThreads: 1, executionProviders: ['cpu'] });
    const a = readWav16(wav), n = Math.floor(seconds * 16000), W = 512, C = 64;
    const x = new Float32Array(n);
    for (let i = 0; i < n; i++) x[i] = a[i % a.length];
    const nw = Math.ceil(n / W);
    const sr = new ort.Tensor('int64', BigInt64Array.from([16000n]), []);
    for (const b of sizes) {
        const times = [];
        for (let rep = 0; rep < 5; rep++) {
            let state = new ort.Tensor('float32', new Float32Array(2 * b * 128), [2, b, 128]);
            const buf = new Float32Array(b * (C + W));
            const t0 = process.hrtime.bigint();
            for (let k = 0; k < nw; k++) {
                for (let s = 0; s < b; s++) {
                    const row = buf.subarray(s * (C + W), (s + 1) * (C + W));
                    row.copyWithin(0, W, W + C);
                    const end = Math.min(n, (k + 1) * W);
                    row.fill(0, C);
                    row.set(x.subarray(k * W, end), C);
                }
                const r = await sess.run({ input: new ort.Tensor('float32', buf, [b, C + W]),
                                           state, sr });
                state = r.stateN;
            }
            times.push(Number(process.hrtime.bigint() - t0) / 1e9);
        }
        times.sort((p, q) => p - q);
        const win = nw * b, t = times[2];
        console.log(JSON.stringify({ impl: 'onnxruntime', streams: b, seconds, windows: win,
                                     median_s: +t.toFixed(4), windows_per_s: Math.round(win / t),
                                     rtfx: +(seconds * b / t).toFixed(1) }));
    }
}
main().catch((e) => { console.error(`silero_vad_ort: ${e.message}`); process.exit(1); });
