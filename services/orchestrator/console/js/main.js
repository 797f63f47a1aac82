// The console's shell: the API key (entered once, kept in this tab's sessionStorage), the tabs
// (#connect-four, #puzzles, #ask, #runs) and the server's settings.

import { apiKey, consoleConfig, setApiKey } from "./api.js";
import { askPanel } from "./ask.js";
import { connectFourPanel } from "./connect4.js";
import { puzzlesPanel } from "./puzzles.js";
import { runsPanel } from "./runs.js";
import { h, setConfig } from "./ui.js";

const TABS = [
  ["connect-four", "Connect Four", connectFourPanel],
  ["puzzles", "Sudoku and mazes", puzzlesPanel],
  ["ask", "Ask", askPanel],
  ["runs", "Runs", runsPanel],
];

function keyForm() {
  const input = h("input", { type: "password", id: "api-key", autocomplete: "off",
    placeholder: "API key", "aria-label": "API key", value: apiKey() });
  const state = h("span", { class: "muted", id: "key-state" });
  const show = () => { state.textContent = apiKey() ? "key set for this tab" : "no key"; };
  const form = h("form", { class: "key", onsubmit: (event) => {
    event.preventDefault();
    setApiKey(input.value.trim());
    show();
  } }, input, h("button", { type: "submit" }, "Use key"),
  h("button", { type: "button", onclick: () => { input.value = ""; setApiKey(""); show(); } },
    "Forget"), state);
  show();
  return form;
}

async function start() {
  setConfig(await consoleConfig());
  document.querySelector("header").append(keyForm());
  const nav = document.querySelector("nav");
  const main = document.querySelector("main");
  const panels = new Map();
  for (const [id, label, build] of TABS) {
    const section = h("section", { id: `panel-${id}`, class: "panel", hidden: true });
    main.append(section);
    panels.set(id, { section, build, built: null });
    nav.append(h("a", { href: `#${id}`, id: `tab-${id}` }, label));
  }
  const select = () => {
    const id = panels.has(location.hash.slice(1)) ? location.hash.slice(1) : TABS[0][0];
    for (const [name, panel] of panels) {
      panel.section.hidden = name !== id;
      document.getElementById(`tab-${name}`).classList.toggle("active", name === id);
    }
    const panel = panels.get(id);
    if (!panel.built) panel.built = panel.build(panel.section) || {};
    if (panel.built.refresh) panel.built.refresh();
  };
  window.addEventListener("hashchange", select);
  select();
}

start().catch((error) => {
  document.querySelector("main").textContent = `The console could not start: ${error.message}`;
});
