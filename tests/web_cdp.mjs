// Drives headless Chromium over the DevTools protocol (Node's built-in
// WebSocket, no npm packages): opens URL, waits in real time until the page's
// last reply is finished (data-state="done"), prints {replies, metas} as
// JSON, and writes a PNG screenshot.
//   node --experimental-websocket web_cdp.mjs CHROMIUM URL SHOT.png PROFILE_DIR
import { spawn } from "node:child_process";
import { readFileSync, writeFileSync, existsSync } from "node:fs";
import { join } from "node:path";

const [chromium, url, shot, profile] = process.argv.slice(2);
const browser = spawn(chromium, [
  "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
  `--user-data-dir=${profile}`, "--remote-debugging-port=0", "--window-size=1000,700", "about:blank",
], { stdio: ["ignore", "ignore", "pipe"] });
let stderr = "";
browser.stderr.on("data", (d) => { stderr += d; });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const deadline = Date.now() + 90_000;
function die(msg) {
  console.error(msg);
  browser.kill("SIGKILL");
  process.exit(1);
}

try {
  const portFile = join(profile, "DevToolsActivePort");
  while (!existsSync(portFile)) {
    if (Date.now() > deadline || browser.exitCode !== null) die("chromium did not start:\n" + stderr.slice(-2000));
    await sleep(100);
  }
  await sleep(100);
  const port = readFileSync(portFile, "utf8").split("\n")[0];
  const targets = await (await fetch(`http://127.0.0.1:${port}/json/list`)).json();
  const page = targets.find((t) => t.type === "page");
  const ws = new WebSocket(page.webSocketDebuggerUrl);
  await new Promise((res, rej) => { ws.onopen = res; ws.onerror = rej; });
  let next = 1;
  const waiting = new Map();
  ws.onmessage = (ev) => {
    const m = JSON.parse(ev.data);
    if (m.id && waiting.has(m.id)) {
      const { res, rej } = waiting.get(m.id);
      waiting.delete(m.id);
      m.error ? rej(new Error(JSON.stringify(m.error))) : res(m.result);
    }
  };
  const call = (method, params = {}) => new Promise((res, rej) => {
    const id = next++;
    waiting.set(id, { res, rej });
    ws.send(JSON.stringify({ id, method, params }));
  });
  const evaluate = async (expr) => (await call("Runtime.evaluate", { expression: expr, returnByValue: true })).result.value;

  await call("Page.enable");
  await call("Page.navigate", { url });
  const probe = `(() => { const r = [...document.querySelectorAll(".msg.assistant")];
    return r.length && r.every((d) => d.dataset.state === "done") ? r.length : 0; })()`;
  while (!(await evaluate(probe).catch(() => 0))) {
    if (Date.now() > deadline) die("the reply did not finish: " + (await evaluate("document.getElementById('log').innerText")));
    await sleep(200);
  }
  const result = await evaluate(`({
    replies: [...document.querySelectorAll(".msg.assistant")].map((d) => ({
      text: [...d.childNodes].filter((n) => n.nodeType === 3).map((n) => n.textContent).join(""),
      error: d.classList.contains("error") })),
    metas: [...document.querySelectorAll(".msg .meta")].map((m) => m.textContent) })`);
  const png = await call("Page.captureScreenshot", { format: "png" });
  writeFileSync(shot, Buffer.from(png.data, "base64"));
  console.log(JSON.stringify(result));
  ws.close();
} catch (e) {
  die("web_cdp: " + (e.stack || e));
}
browser.kill("SIGTERM");
process.exit(0);
