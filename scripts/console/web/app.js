// The console's shell: the launch token from the address the CLI printed, the navigation from the page
// registry (/api/pages), and each page's module (pages/<id>.js) rendered into <main> on #<id>.
import { h } from "./dom.js";

const token = new URLSearchParams(location.search).get("token") ?? "";

/** An API call with the launch token; resolves with the JSON, or rejects with { status, error, problems }. */
export async function api(path, body) {
  const response = await fetch(`/api/${path}`, {
    method: body === undefined ? "GET" : "POST",
    headers: {
      "x-tollgate-console-token": token,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const reply = await response.json();
  if (!response.ok) throw { status: response.status, error: reply.error, problems: reply.problems ?? [] };
  return reply;
}

const main = document.getElementById("page");
const nav = document.querySelector("header nav");
let pages = [];

async function show() {
  const id = location.hash.slice(1) || pages[0]?.id;
  const page = pages.find((p) => p.id === id);
  for (const link of nav.querySelectorAll("a")) {
    if (link.dataset.page === id) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (!page) return main.replaceChildren(h("p", {}, `no page ${id}`));
  const root = h("div", { "data-page": page.id });
  main.replaceChildren(h("h1", {}, page.title), root);
  try {
    const module = await import(`./pages/${page.id}.js`);
    await module.render(root, api);
  } catch (error) {
    root.append(h("p", { class: "status error", role: "alert" }, error.error ?? String(error)));
  }
  root.dataset.ready = "true";
}

try {
  ({ pages } = await api("pages"));
  nav.replaceChildren(...pages.map((p) => h("a", { href: `?token=${token}#${p.id}`, "data-page": p.id }, p.title)));
  document.getElementById("where").textContent = location.host;
  addEventListener("hashchange", show);
  await show();
} catch (error) {
  main.replaceChildren(h("p", { class: "status error", role: "alert" }, error.error ?? String(error)));
}
