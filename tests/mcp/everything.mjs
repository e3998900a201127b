// The MCP project's "everything" server in the transport its first argument names (stdio, streamableHttp), on
// Debian's Node 18 too: the server's SDK calls the global `crypto`, which Node 19 made default and Node 18 has
// as node:crypto's webcrypto.
import { webcrypto } from "node:crypto";

if (globalThis.crypto === undefined) globalThis.crypto = webcrypto;
await import("./node_modules/@modelcontextprotocol/server-everything/dist/index.js");
