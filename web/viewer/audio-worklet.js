// Jitter buffer for the viewer's desktop audio, on the audio rendering thread.
//
// Decoded 20 ms chunks (two Float32Array planes) arrive on the port. Output starts once
// targetMs is buffered (and again after an underrun); above maxMs the oldest chunks are
// dropped, so a stall never turns into lasting delay. Counters go back to the page.
class JitterBuffer extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const { targetMs = 60, maxMs = 200 } = options.processorOptions || {};
    this.target = Math.round((sampleRate * targetMs) / 1000);
    this.max = Math.round((sampleRate * maxMs) / 1000);
    this.chunks = [];
    this.offset = 0;
    this.buffered = 0;
    this.playing = false;
    this.dropped = 0;
    this.underruns = 0;
    this.blocks = 0;
    this.port.onmessage = (event) => this.push(event.data);
  }

  push(planes) {
    this.chunks.push(planes);
    this.buffered += planes[0].length;
    while (this.buffered - this.offset > this.max && this.chunks.length > 1) {
      const oldest = this.chunks.shift();
      this.buffered -= oldest[0].length;
      this.dropped += 1;
      this.offset = 0;
    }
  }

  process(inputs, outputs) {
    const out = outputs[0];
    const frames = out[0].length;
    if (!this.playing && this.buffered - this.offset >= this.target) this.playing = true;
    let written = 0;
    while (this.playing && written < frames && this.chunks.length) {
      const chunk = this.chunks[0];
      const take = Math.min(frames - written, chunk[0].length - this.offset);
      for (let c = 0; c < out.length; c += 1) {
        out[c].set(chunk[Math.min(c, chunk.length - 1)].subarray(this.offset, this.offset + take),
          written);
      }
      written += take;
      this.offset += take;
      if (this.offset >= chunk[0].length) {
        this.chunks.shift();
        this.buffered -= chunk[0].length;
        this.offset = 0;
      }
    }
    if (this.playing && written < frames) {
      this.playing = false;
      this.underruns += 1;
    }
    for (let c = 0; c < out.length; c += 1) out[c].fill(0, written);
    if ((this.blocks += 1) % 50 === 0) {
      this.port.postMessage({ dropped: this.dropped, underruns: this.underruns,
        bufferedMs: Math.round(((this.buffered - this.offset) * 1000) / sampleRate) });
    }
    return true;
  }
}

registerProcessor("relaydesk-jitter-buffer", JitterBuffer);
