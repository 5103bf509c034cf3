// One AG-UI run through the official client (@ag-ui/client HttpAgent) with an optional
// bearer token in its headers, for the authentication tests. Prints one JSON line: the
// answer's text, the event types, and the error (with its HTTP status and body) if the
// run was refused.
//
// usage: node agui_auth.mjs <base url> <thread id> <token or ""> <text>
import { randomUUID } from "node:crypto";
import { HttpAgent } from "@ag-ui/client";

const [baseUrl, threadId, token, text] = process.argv.slice(2);

const warnings = [];
console.warn = (...args) => warnings.push(args.map(String).join(" "));

const headers = token ? { Authorization: `Bearer ${token}` } : {};
const agent = new HttpAgent({ url: `${baseUrl}/agui`, threadId, headers });
agent.messages = [{ id: randomUUID(), role: "user", content: text }];

const events = [];
let error = null;
try {
  await agent.runAgent({}, { onEvent: ({ event }) => events.push(event) });
} catch (caught) {
  error = {
    message: String(caught?.message ?? caught),
    status: caught?.status ?? null,
    payload: caught?.payload ?? null,
  };
}

console.log(
  JSON.stringify({
    error,
    warnings,
    types: events.map((e) => e.type),
    text: events
      .filter((e) => e.type === "TEXT_MESSAGE_CONTENT")
      .map((e) => e.delta)
      .join(""),
  }),
);
