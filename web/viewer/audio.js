// Desktop audio in the viewer page: Opus packets from WS /vnc/{sid}/{token}/audio, decoded with
// WebCodecs (AudioDecoder, opus, 48 kHz, stereo) and played through an AudioWorklet jitter
// buffer (audio-worklet.js: ~60 ms target, capped, oldest dropped). Browsers only start audio
// after a user gesture, so nothing plays until the speaker button is pressed.
//
// Each message: u64 capture time (µs since the epoch), u32 sequence, one Opus packet (20 ms).
// createAudioPlayer({url, button, statusEl}) → {start, stop, stats}; window.relaydeskAudio
// mirrors stats (decoded frames, decoder errors, packets, latency) for tests and debugging.

export const AUDIO_UNAVAILABLE = 4415;
const HEADER_BYTES = 12;
const CONFIG = Object.freeze({ codec: "opus", sampleRate: 48000, numberOfChannels: 2 });
const TARGET_MS = 60;
const MAX_MS = 200;

export function audioSupported() {
  return typeof AudioDecoder === "function" && typeof AudioWorkletNode === "function"
    && typeof EncodedAudioChunk === "function";
}

export function audioUrl(location, sid, token) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}/vnc/${sid}/${token}/audio`;
}

export function createAudioPlayer({ url, button, statusEl }) {
  const stats = { state: "off", packets: 0, decoded: 0, errors: 0, lastError: null,
    latencyMs: null, dropped: 0, underruns: 0, bufferedMs: 0, lastClose: null };
  window.relaydeskAudio = stats;
  let context = null;
  let node = null;
  let decoder = null;
  let socket = null;

  function show(state, text) {
    stats.state = state;
    button.dataset.state = state;
    button.setAttribute("aria-pressed", state === "on" ? "true" : "false");
    button.title = text;
    if (statusEl) statusEl.textContent = text;
  }

  function unavailable(why) {
    stop();
    show("unavailable", `Audio unavailable: ${why}`);
    button.disabled = true;
  }

  function deliver(data) {
    const frames = data.numberOfFrames;
    const channels = [];
    for (let plane = 0; plane < 2; plane += 1) {
      const samples = new Float32Array(frames);
      data.copyTo(samples, { planeIndex: Math.min(plane, data.numberOfChannels - 1),
        format: "f32-planar" });
      channels.push(samples);
    }
    data.close();
    stats.decoded += 1;
    if (node) node.port.postMessage(channels, channels.map((c) => c.buffer));
  }

  function onPacket(buffer) {
    const view = new DataView(buffer);
    const capturedUs = view.getUint32(0) * 2 ** 32 + view.getUint32(4);
    stats.packets += 1;
    stats.latencyMs = Date.now() - capturedUs / 1000;
    if (!decoder || decoder.state !== "configured") return;
    decoder.decode(new EncodedAudioChunk({ type: "key", timestamp: capturedUs,
      data: new Uint8Array(buffer, HEADER_BYTES) }));
  }

  function connect() {
    socket = new WebSocket(url, ["binary"]);
    socket.binaryType = "arraybuffer";
    socket.addEventListener("open", () => show("on", "Audio on"));
    socket.addEventListener("message", (event) => onPacket(event.data));
    socket.addEventListener("close", (event) => {
      stats.lastClose = { code: event.code, reason: event.reason };
      if (event.code === AUDIO_UNAVAILABLE) {
        unavailable(event.reason.replace(/^audio unavailable: /, "") || "no sound");
      } else if (stats.state !== "off" && stats.state !== "unavailable") {
        stop();
        show("off", `Audio stopped (${event.reason || event.code}) — press to retry`);
      }
    });
  }

  async function start() {
    if (!audioSupported()) return unavailable("this browser has no WebCodecs audio");
    const support = await AudioDecoder.isConfigSupported(CONFIG);
    if (!support.supported) return unavailable("this browser cannot decode Opus");
    show("connecting", "Audio: connecting…");
    context = new AudioContext({ sampleRate: CONFIG.sampleRate, latencyHint: "interactive" });
    await context.audioWorklet.addModule("/viewer/audio-worklet.js");
    node = new AudioWorkletNode(context, "relaydesk-jitter-buffer", {
      numberOfInputs: 0, outputChannelCount: [2],
      processorOptions: { targetMs: TARGET_MS, maxMs: MAX_MS },
    });
    node.port.onmessage = (event) => Object.assign(stats, event.data);
    node.connect(context.destination);
    await context.resume();
    decoder = new AudioDecoder({
      output: deliver,
      error: (error) => { stats.errors += 1; stats.lastError = String(error); },
    });
    decoder.configure(CONFIG);
    connect();
    return undefined;
  }

  function stop() {
    const open = socket;
    socket = null;
    if (open && open.readyState <= WebSocket.OPEN) open.close(1000, "audio off");
    if (decoder && decoder.state !== "closed") decoder.close();
    decoder = null;
    if (node) node.disconnect();
    node = null;
    if (context) context.close();
    context = null;
  }

  button.addEventListener("click", () => {
    if (stats.state === "off") {
      start().catch((error) => unavailable(String(error)));
    } else if (stats.state !== "unavailable") {
      stop();
      show("off", "Audio off — press Sound to listen");
    }
  });
  if (audioSupported()) {
    show("off", "Audio off — press Sound to listen");
  } else {
    unavailable("this browser has no WebCodecs audio");
  }
  return { start, stop, stats };
}

// The viewer page has a speaker button: wire it up (index.html loads this module).
const button = document.getElementById("audio");
const session = /^\/vnc\/([^/]+)\/([^/]+)\/?/.exec(window.location.pathname);
if (button && session) {
  createAudioPlayer({ url: audioUrl(window.location, session[1], session[2]), button,
    statusEl: document.getElementById("audio-status") });
}
