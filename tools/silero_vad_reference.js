#!/usr/bin/env node
// silero_vad_reference.js — the reference speech probabilities for hark's Silero VAD: ONNX
// Runtime (npm onnxruntime-node, CPU, one thread) runs silero-vad's original silero_vad.onnx
// over WAV files the way silero-vad's OnnxWrapper.audio_forward / get_speech_timestamps do:
// the audio zero-padded to whole windows, each call fed `context` samples kept from the previous
// call (zeros first) plus `window` new ones, the LSTM state carried, fresh per file.
//
//   node tools/silero_vad_reference.js --onnx silero_vad.onnx --rate 16000|8000 \
//       --output probs.json FILE.wav...
//
// WAV: RIFF PCM 16-bit (read as s / 32768, like libsndfile) or float 32-bit, mono. A file at
// k times --rate is decimated (every k-th sample, as silero-vad does for multiples of 16 kHz),
// so the 8 kHz branch runs on the 16 kHz test audio. Output: {"rate", "window", "context",
// "ort_version", "files": [{"file": basename, "n_samples", "probs": [...]}]}.
// tools/silero_vad_reference.sh installs onnxruntime-node outside the repository and runs this;
// tests/model/silero/test_silero_vad.c reads the output.
'use strict';
const fs = require('fs');
const path = require('path');

function loadOrt() {
    try {
        return require('onnxruntime-node');
    } catch (e) {
        const dir = process.env.HARK_ORT_DIR;
        if (!dir) throw e;
        return require(path.join(dir, 'node_modules', 'onnxruntime-node'));
    }
}

function readWav(file) {
    const b = fs.readFileSync(file);
    if (b.toString('ascii', 0, 4) !== 'RIFF' || b.toString('ascii', 8, 12) !== 'WAVE')
        throw new Error(`${file}: not a RIFF WAVE file`);
    let off = 12, fmt = null, data = null;
    while (off + 8 <= b.length) {
        const id = b.toString('ascii', off, off + 4), len = b.readUInt32LE(off + 4);
        if (id === 'fmt ') fmt = { tag: b.readUInt16LE(off + 8), ch: b.readUInt16LE(off + 10),
                                   rate: b.readUInt32LE(off + 12), bits: b.readUInt16LE(off + 22) };
        else if (id === 'data') data = b.subarray(off + 8, Math.min(b.length, off + 8 + len));
        off += 8 + len + (len & 1);
    }
    if (!fmt || !data) throw new Error(`${file}: no fmt or data chunk`);
    if (fmt.ch !== 1) throw new Error(`${file}: ${fmt.ch} channels (mono only)`);
    let x;
    if (fmt.tag === 1 && fmt.bits === 16) {
        x = new Float32Array(data.length >> 1);
        for (let i = 0; i < x.length; i++) x[i] = data.readInt16LE(2 * i) / 32768;
    } else if (fmt.tag === 3 && fmt.bits === 32) {
        x = new Float32Array(data.length >> 2);
        for (let i = 0; i < x.length; i++) x[i] = data.readFloatLE(4 * i);
    } else {
        throw new Error(`${file}: format ${fmt.tag}/${fmt.bits} bits (PCM 16 or float 32 only)`);
    }
    return { rate: fmt.rate, x };
}

async function main() {
    const args = process.argv.slice(2);
    let onnx = null, rate = 16000, output = null;
    const files = [];
    for (let i = 0; i < args.length; i++) {
        if (args[i] === '--onnx') onnx = args[++i];
        else if (args[i] === '--rate') rate = parseInt(args[++i], 10);
        else if (args[i] === '--output') output = args[++i];
        else files.push(args[i]);
    }
    if (!onnx || !output || !files.length || (rate !== 16000 && rate !== 8000)) {
        console.error('usage: silero_vad_reference.js --onnx FILE --rate 16000|8000 ' +
                      '--output OUT.json FILE.wav...');
        process.exit(2);
    }
    const ort = loadOrt();
    const sess = await ort.InferenceSession.create(onnx, {
        intraOpNumThreads: 1, interOpNumThreads: 1, executionProviders: ['cpu'] });
    const window = rate === 16000 ? 512 : 256, context = rate === 16000 ? 64 : 32;
    const srT = new ort.Tensor('int64', BigInt64Array.from([BigInt(rate)]), []);
    const out = { rate, window, context, onnx: path.basename(onnx),
                  ort_version: (ort.env.versions && (ort.env.versions.node ||
                                ort.env.versions.common)) || 'unknown', files: [] };
    for (const f of files) {
        const w = readWav(f);
        if (w.rate % rate) throw new Error(`${f}: ${w.rate} Hz is not a multiple of ${rate} Hz`);
        const step = w.rate / rate, n = Math.floor((w.x.length + step - 1) / step);
        const n_win = Math.ceil(n / window);
        const pcm = new Float32Array(n_win * window); // zero padded to whole windows
        for (let i = 0; i < n; i++) pcm[i] = w.x[i * step];
        let state = new ort.Tensor('float32', new Float32Array(2 * 128), [2, 1, 128]);
        const buf = new Float32Array(context + window); // context (zeros first), then the window
        const probs = [];
        for (let k = 0; k < n_win; k++) {
            buf.set(pcm.subarray(k * window, (k + 1) * window), context);
            const r = await sess.run({
                input: new ort.Tensor('float32', Float32Array.from(buf), [1, context + window]),
                state, sr: srT });
            probs.push(r.output.data[0]);
            state = r.stateN;
            buf.copyWithin(0, window, window + context); // the last `context` samples
        }
        out.files.push({ file: path.basename(f), n_samples: n, probs });
    }
    fs.writeFileSync(output, JSON.stringify(out) + '\n');
    console.log(`wrote ${output}: ${files.length} files at ${rate} Hz`);
}

main().catch((e) => { console.error(`silero_vad_reference: ${e.message}`); process.exit(1); });
