// Model output as Markdown: marked (GFM) renders it, DOMPurify sanitizes the HTML, and fenced
// code gets highlighting and a copy button. Both libraries are vendored next to this file at a
// pinned version (VENDORED.md). Nothing in model output can run: raw HTML in the Markdown is
// shown as text, the sanitizer removes scripts, handlers and styles anyway, links may only be
// http(s) or mailto and open in a new tab without an opener or a referrer, and images become
// links (the page's CSP loads none from elsewhere).

import { Marked } from "./marked.esm.js";
import DOMPurify from "./purify.es.js";

const escapeHtml = (text) =>
  text.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);

const markdown = new Marked({ gfm: true, breaks: true });
markdown.use({
  renderer: {
    html: (token) => escapeHtml(token.text),
    image: (token) => `<a href="${escapeHtml(token.href)}">${escapeHtml(token.text || "image")}</a>`,
  },
});

const SAFE_URL = /^(?:https?:|mailto:)/i;

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName !== "A") return;
  const href = node.getAttribute("href");
  if (!href || !SAFE_URL.test(href)) {
    node.removeAttribute("href");
    return;
  }
  node.setAttribute("target", "_blank");
  node.setAttribute("rel", "noopener noreferrer");
});

const PURIFY = {
  ALLOWED_URI_REGEXP: SAFE_URL,
  FORBID_TAGS: ["style", "img", "form", "input", "button", "textarea", "select", "iframe", "svg", "math"],
  FORBID_ATTR: ["style", "id", "name"],
  RETURN_DOM_FRAGMENT: true,
};

// Renders `text` as Markdown into `container`, replacing what it held.
export function renderMarkdown(container, text) {
  const fragment = DOMPurify.sanitize(markdown.parse(text), PURIFY);
  for (const code of fragment.querySelectorAll("pre > code")) decorate(code);
  container.replaceChildren(fragment);
}

// -- fenced code ---------------------------------------------------------------------------

function decorate(code) {
  const language = (/\blanguage-([\w+#.-]+)/.exec(code.className) || [])[1] || "";
  highlight(code, language.toLowerCase());
  const pre = code.parentElement;
  const box = document.createElement("div");
  box.className = "code";
  const bar = document.createElement("div");
  bar.className = "code-bar";
  const label = document.createElement("span");
  label.textContent = language || "code";
  const copy = document.createElement("button");
  copy.type = "button";
  copy.className = "copy";
  copy.textContent = "Copy";
  bar.append(label, copy);
  pre.replaceWith(box);
  box.append(bar, pre);
}

// The copy buttons are handled by one listener on the document (set up in app.js).
export async function copyCode(button) {
  const code = button.closest(".code").querySelector("code").textContent;
  try {
    await navigator.clipboard.writeText(code);
  } catch {
    copyBySelection(code); // not a secure context, or no clipboard permission
  }
  button.textContent = "Copied";
  setTimeout(() => (button.textContent = "Copy"), 1500);
}

function copyBySelection(text) {
  const area = document.createElement("textarea");
  area.value = text;
  document.body.append(area);
  area.select();
  document.execCommand("copy");
  area.remove();
}

// A small highlighter: comments, strings, numbers and keywords of the usual languages, as
// spans with classes (no inline style: the CSP forbids it). The text itself is unchanged.
const KEYWORDS = new Set(
  (
    "and as async await break case catch class const continue def default del do elif else enum " +
    "except export extends false False finally fn for from func function go if impl import in " +
    "interface is lambda let loop match mod mut new nil None not null or package pass pub raise " +
    "return self static struct super switch this throw true True try type typeof use var void " +
    "while with yield fi then esac done echo local public private protected int float bool string"
  ).split(" "),
);
const HASH_COMMENTS = new Set(["python", "py", "sh", "bash", "shell", "zsh", "console", "yaml", "yml", "toml", "ruby", "rb", "r", "perl", "make", "makefile", "dockerfile", "ini", "conf"]);
const SLASH_COMMENTS = new Set(["js", "javascript", "ts", "typescript", "jsx", "tsx", "json5", "c", "cpp", "c++", "h", "java", "kotlin", "go", "rust", "rs", "swift", "cs", "c#", "scala", "dart", "php", "css", "scss", "proto", "protobuf"]);

function tokenizer(language) {
  const comments = [];
  if (!SLASH_COMMENTS.has(language)) comments.push("#[^\\n]*");
  if (!HASH_COMMENTS.has(language)) comments.push("//[^\\n]*", "/\\*[\\s\\S]*?\\*/");
  if (language === "sql" || language === "lua" || language === "haskell") comments.push("--[^\\n]*");
  const parts = [
    `(${comments.join("|")})`,
    `("(?:[^"\\\\\\n]|\\\\.)*"|'(?:[^'\\\\\\n]|\\\\.)*'|\`(?:[^\`\\\\]|\\\\.)*\`)`,
    "(\\b\\d[\\d_]*(?:\\.\\d+)?(?:e[+-]?\\d+)?\\b|\\b0x[\\da-f]+\\b)",
    "([A-Za-z_$][\\w$]*)",
  ];
  return new RegExp(parts.join("|"), "gi");
}

function highlight(code, language) {
  const text = code.textContent;
  const pattern = tokenizer(language);
  const out = document.createDocumentFragment();
  let at = 0;
  const span = (className, value) => {
    const node = document.createElement("span");
    node.className = className;
    node.textContent = value;
    out.append(node);
  };
  for (const match of text.matchAll(pattern)) {
    const [value, comment, string, number, word] = match;
    if (word && !KEYWORDS.has(word)) continue;
    if (match.index > at) out.append(text.slice(at, match.index));
    if (comment) span("tok-comment", value);
    else if (string) span("tok-string", value);
    else if (number) span("tok-number", value);
    else span("tok-keyword", value);
    at = match.index + value.length;
  }
  out.append(text.slice(at));
  code.replaceChildren(out);
}
