// Test-only host: serve Perfetto UI's trace_processor.wasm over a unix socket.
//
// Usage: node tp_wasm_host.js <dir with engine_bundle.js + trace_processor.wasm> <socket>
//
// The Perfetto UI runs trace processor as WebAssembly inside a web worker
// (ui/src/engine/wasm_bridge.ts): the worker receives a MessagePort and relays
// raw TraceProcessorRpcStream bytes between that port and the wasm module.
// This script fakes just enough of a worker for that bundle (the wasm is read
// from disk by a synchronous XMLHttpRequest stand-in) and relays the same
// bytes to and from a unix socket, so perfetto's Python client
// (TraceProcessor(remote=<socket>)) can query it.
'use strict';
const fs = require('fs');
const net = require('net');
const path = require('path');

const [dir, socketPath] = process.argv.slice(2);
if (!dir || !socketPath) {
  console.error('usage: node tp_wasm_host.js <web_dist version dir> <socket path>');
  process.exit(2);
}

function WorkerGlobalScope() {}

class SyncFileRequest {
  open(method, url) { this.url = String(url); }
  overrideMimeType() {}
  setRequestHeader() {}
  send() {
    const file = path.join(dir, path.basename(new URL(this.url, 'file:///').pathname));
    const bytes = fs.readFileSync(file);
    this.status = 200;
    this.response = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length);
    if (this.onload) this.onload();
  }
}

const fakeSelf = {
  location: { href: 'file://' + path.join(path.resolve(dir), 'engine_bundle.js') },
  onmessage: null,
  postMessage() {},
  addEventListener() {},
};

// The bundle detects its environment with `typeof process`, `typeof window`
// and `typeof WorkerGlobalScope`: shadow the first two, define the third.
const source = fs.readFileSync(path.join(dir, 'engine_bundle.js'), 'utf8');
const run = new Function('self', 'WorkerGlobalScope', 'XMLHttpRequest', 'process', 'window',
                         'importScripts', source);
run(fakeSelf, WorkerGlobalScope, SyncFileRequest, undefined, undefined, undefined);

// Replies go to the client that sent the last request: clients take turns
// (tracehouse holds a lock file per session while it loads and queries).
let current = null;
const port = {
  onmessage: null,
  postMessage(data) {
    if (current && !current.destroyed && data && data.length) {
      current.write(Buffer.from(data.buffer, data.byteOffset, data.length));
    }
  },
  start() {},
};

function serve() {
  fakeSelf.onmessage({ data: port });
  try { fs.unlinkSync(socketPath); } catch (e) { /* not there */ }
  const server = net.createServer((socket) => {
    socket.on('data', (chunk) => {
      current = socket;
      try {
        port.onmessage({ data: new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.length) });
      } catch (err) {
        console.error(String((err && err.stack) || err));
        process.exit(3);
      }
    });
    socket.on('error', () => {});
  });
  server.listen(socketPath, () => { console.log('ready ' + socketPath); });
}

// Let the module finish its (synchronous) instantiation and run its init
// callbacks before the first request can arrive.
setTimeout(serve, 200);
