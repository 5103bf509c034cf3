// The chat page's HTTP side: JSON calls and server-sent event streams on the public /agentik
// API (docs/agentik-api.md), with the bearer token this tab was given.

export const TOKEN_KEY = "agentik.token";
export const API = "agentik/conversations";

export class HttpError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// Called with the server's message when it answers 401 (the page shows its token form).
let onUnauthenticated = () => {};
export function whenUnauthenticated(handler) {
  onUnauthenticated = handler;
}

function headers(extra) {
  const all = { ...extra };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) all.Authorization = `Bearer ${token}`;
  return all;
}

function init(method, body, signal, lastEventId) {
  const extra = body === undefined ? {} : { "Content-Type": "application/json" };
  if (lastEventId !== undefined) extra["Last-Event-ID"] = String(lastEventId);
  const request = { method, headers: headers(extra), signal };
  if (body !== undefined) request.body = JSON.stringify(body);
  return request;
}

async function httpError(response) {
  let code = `http_${response.status}`;
  let message = response.statusText || code;
  try {
    const body = await response.json();
    ({ code, message } = body.error);
  } catch {
    // not our JSON error shape: keep the status line
  }
  if (response.status === 401) onUnauthenticated(message);
  return new HttpError(response.status, code, message);
}

export async function call(method, path, body) {
  const response = await fetch(path, init(method, body));
  if (!response.ok) throw await httpError(response);
  return response.status === 204 ? null : response.json();
}

// Reads an SSE response (fetch, since EventSource cannot POST or send Authorization) and
// calls onFrame({id, event, data}) per frame. onOpen() runs once the server has accepted the
// request (a refusal throws an HttpError instead); lastEventId, when given, is sent as the
// Last-Event-ID header (where /events resumes). Resolves when the server ends the stream.
export async function stream(method, path, { body, signal, onFrame, onOpen = () => {}, lastEventId }) {
  const response = await fetch(path, init(method, body, signal, lastEventId));
  if (!response.ok) throw await httpError(response);
  onOpen();
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let frame = {};
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n")) >= 0) {
      let line = buffer.slice(0, end);
      buffer = buffer.slice(end + 1);
      if (line.endsWith("\r")) line = line.slice(0, -1);
      if (line === "") {
        if (frame.data !== undefined) onFrame(frame);
        frame = {};
      } else if (!line.startsWith(":")) {
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "data") frame.data = frame.data === undefined ? value : `${frame.data}\n${value}`;
        else if (field === "id" || field === "event") frame[field] = value;
      }
    }
  }
}

// Waits `ms`, or less when `signal` aborts.
export function pause(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    });
  });
}
