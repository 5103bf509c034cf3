// A polyglot client: drives the agentik engine from engine.proto alone with
// @grpc/grpc-js and @grpc/proto-loader (no generated code), and prints one JSON
// summary line for the Python test that runs it.
//
// usage: node grpc_run.mjs <host:port> <thread id> <user text>
import path from "node:path";
import { fileURLToPath } from "node:url";
import grpc from "@grpc/grpc-js";
import protoLoader from "@grpc/proto-loader";

const here = path.dirname(fileURLToPath(import.meta.url));
const protoRoot = path.resolve(here, "../../proto");
const [target, threadId, text] = process.argv.slice(2);

const definition = protoLoader.loadSync("agentik/engine/v1/engine.proto", {
  includeDirs: [protoRoot],
  keepCase: true,
  longs: Number,
  enums: String,
  defaults: false,
  oneofs: true,
});
const { AgentEngine } = grpc.loadPackageDefinition(definition).agentik.engine.v1;
const client = new AgentEngine(target, grpc.credentials.createInsecure());

function unary(method, request) {
  return new Promise((resolve, reject) =>
    client[method](request, (error, reply) => (error ? reject(error) : resolve(reply))),
  );
}

const events = [];
const call = client.Run({
  session_id: threadId,
  create_session: true,
  messages: [{ role: "ROLE_USER", content: [{ text: { text } }] }],
});
call.on("data", (event) => events.push(event));
call.on("error", (error) => {
  console.log(JSON.stringify({ error: error.code, details: error.details }));
  process.exit(1);
});
call.on("end", async () => {
  const messages = await unary("ListMessages", { session_id: threadId });
  const invalid = await unary("GetSession", { session_id: "" }).catch((error) => error.code);
  console.log(
    JSON.stringify({
      kinds: events.map((e) => e.kind),
      seqs: events.map((e) => e.seq),
      text: events
        .filter((e) => e.kind === "text_message_content")
        .map((e) => e.text_message_content.delta)
        .join(""),
      outcome: events.at(-1).run_finished?.outcome ?? null,
      roles: messages.messages.map((m) => m.role),
      invalidArgumentCode: invalid,
    }),
  );
  client.close();
});
