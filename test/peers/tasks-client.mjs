// The MCP Tasks client of the e2e suite (test/e2e/tasks_test.go): the extension's own client,
// @modelcontextprotocol/ext-tasks, over the @modelcontextprotocol/sdk streamable HTTP
// transport. ext-tasks needs a raw request path for a 2026-07-28 Tasks server, which the v1 SDK
// Client lacks, so a ConnectedMcpSessionPort frames each request (per-request _meta, the
// Mcp-Method and Mcp-Name headers) and sends it on the SDK transport.
//
// Usage: node tasks-client.mjs '{"url":..., "token":..., "op":..., ...}'; prints one JSON line.
//   call   {arguments}: tools/call xema_capabilities_invoke -> {"kind":"task","taskId"} | {"kind":"immediate","result"}
//   get    {taskId}:    tasks/get, as the client's TaskController snapshot sees it -> {"task": raw}
//   settle {taskId}:    resume the task and poll until it ends -> {"status","result"}
//   cancel {taskId}:    tasks/cancel -> {"cancelled":true}
//   legacy {arguments}: a client WITHOUT the extension (the SDK's Client, 2025-11-25) -> {"result"}
// A JSON-RPC error ends in {"error":{"code","message"}}.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { withTasks, JsonRpcResponseError } from "@modelcontextprotocol/ext-tasks/client";

const PROTOCOL = "2026-07-28";
const cmd = JSON.parse(process.argv[2]);
const tool = "xema_capabilities_invoke";

async function modernPort(url, token) {
  const pending = new Map();
  let nextId = 1;
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
    // The 2026-07-28 routing headers: Mcp-Method always, Mcp-Name for a tool's name or a task id.
    fetch: (input, init) => {
      const headers = new Headers(init?.headers);
      if (typeof init?.body === "string") {
        const msg = JSON.parse(init.body);
        headers.set("Mcp-Method", msg.method);
        const name = msg.params?.name ?? msg.params?.taskId;
        if (name !== undefined) headers.set("Mcp-Name", name);
      }
      return fetch(input, { ...init, headers }).then(async (res) => {
        // A 2026-07-28 server answers a JSON-RPC error with an HTTP error status as well; the
        // v1 transport would throw it away, so it is handed on as the message it is.
        if (res.ok || !res.headers.get("content-type")?.includes("application/json")) return res;
        const body = await res.text();
        return new Response(body, { status: 200, headers: { "content-type": "application/json" } });
      });
    },
  });
  transport.setProtocolVersion(PROTOCOL);
  transport.onmessage = (msg) => {
    const resolve = pending.get(msg.id);
    if (resolve !== undefined) {
      pending.delete(msg.id);
      resolve(msg);
    }
  };
  await transport.start();
  return {
    endpointId: url,
    taskCapabilities: { generation: "v2", capabilities: {} },
    async dispatch(request) {
      const id = nextId++;
      const params = { ...(request.params ?? {}) };
      const meta = { ...(params._meta ?? {}) };
      meta["io.modelcontextprotocol/protocolVersion"] = PROTOCOL;
      meta["io.modelcontextprotocol/clientInfo"] = { name: "xema-e2e-tasks", version: "1" };
      meta["io.modelcontextprotocol/clientCapabilities"] ??= {};
      params._meta = meta;
      const answered = new Promise((resolve) => pending.set(id, resolve));
      await transport.send({ jsonrpc: "2.0", id, method: request.method, params });
      const msg = await answered;
      return msg.error !== undefined ? { kind: "error", error: msg.error } : { kind: "result", result: msg.result };
    },
    onServerRequest: () => () => {},
    onNotification: () => () => {},
    onInvalidated: () => () => {},
    invalidated: false,
  };
}

function print(v) {
  process.stdout.write(JSON.stringify(v) + "\n");
}

async function main() {
  if (cmd.op === "legacy") {
    const client = new Client({ name: "xema-e2e-legacy", version: "1" });
    await client.connect(new StreamableHTTPClientTransport(new URL(cmd.url), {
      requestInit: { headers: { Authorization: `Bearer ${cmd.token}` } },
    }));
    print({ result: await client.callTool({ name: tool, arguments: cmd.arguments }) });
    await client.close();
    return;
  }
  const session = withTasks(await modernPort(cmd.url, cmd.token));
  const ref = { endpointId: cmd.url, generation: "v2", taskId: cmd.taskId, originalOperation: "tools/call" };
  switch (cmd.op) {
    case "call": {
      const execution = await session.callTool(tool, cmd.arguments);
      if (execution.kind !== "task") {
        const { outcome } = await execution.settle();
        print({ kind: "immediate", result: outcome.result });
        break;
      }
      // Hand the task off (as a client persisting it would): closing would cancel it.
      await execution.handoff(() => {});
      print({ kind: "task", taskId: execution.handle.taskId });
      break;
    }
    case "get":
      print({ task: (await session.task(cmd.taskId).snapshot()).raw });
      break;
    case "settle": {
      const execution = await session.resumeTask(ref);
      const { outcome } = await execution.settle();
      print({ status: outcome.status, result: outcome.result });
      break;
    }
    case "cancel":
      await session.task(cmd.taskId).cancel();
      print({ cancelled: true });
      break;
    default:
      throw new Error(`unknown op ${cmd.op}`);
  }
}

main().then(() => process.exit(0), (err) => {
  if (err instanceof JsonRpcResponseError) {
    print({ error: { code: err.code, message: err.message } });
    process.exit(0);
  }
  process.stderr.write(`${err?.stack ?? err}\n`);
  process.exit(1);
});
