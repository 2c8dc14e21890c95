// Live usage: a quota rule's windows for one key, read again every second while the page is shown.
import { field, h, showProblems, status } from "../dom.js";

export async function render(root, api) {
  const { rules } = await api("policy");
  const rule = h("select", {}, ...rules.map((r) => h("option", { value: r.name }, r.name)));
  const key = h("input", { type: "text", placeholder: "customer-42", autocomplete: "off" });
  const tenant = h("input", { type: "text", placeholder: "the only tenant syncing it" });
  const line = h("p", { class: "status", role: "status" });
  const rest = h("ul", { class: "problems" });
  const table = h("section", { "aria-label": "usage" });
  const form = h(
    "form",
    { "aria-label": "usage", onsubmit: (event) => watch(event) },
    field("rule", "rule", rule),
    field("key", "key", key),
    field("tenant", "tenant", tenant),
    h("div", { class: "actions" }, h("button", { type: "submit" }, "Watch"), line),
  );
  let timer;
  async function read() {
    if (!root.isConnected) return clearInterval(timer);
    try {
      const usage = await api(
        `usage?${new URLSearchParams({ rule: rule.value, key: key.value, ...(tenant.value ? { tenant: tenant.value } : {}) })}`,
      );
      showProblems(form, [], rest);
      status(line, `read ${new Date(usage.readAt).toISOString()}; ${usage.instances} active instances`, true);
      table.replaceChildren(
        h("h2", {}, `${usage.rule} (${usage.mode}) for ${usage.key}`),
        h(
          "table",
          {},
          h("tr", {}, h("th", {}, "window"), h("th", {}, "used or reserved"), h("th", {}, "max"), h("th", {}, "")),
          ...usage.windows.map((w) =>
            h(
              "tr",
              { "data-window": w.windowMs },
              h("td", {}, `${w.windowMs / 1000} s`),
              h("td", {}, w.used),
              h("td", {}, w.max),
              h(
                "td",
                {},
                h(
                  "div",
                  { class: "meter", role: "meter", "aria-valuenow": w.used, "aria-valuemax": w.max },
                  h("div", { style: `width:${Math.min(100, (100 * w.used) / w.max)}%` }),
                ),
              ),
            ),
          ),
        ),
      );
    } catch (error) {
      clearInterval(timer);
      showProblems(form, error.problems ?? [], rest);
      status(line, error.error ?? String(error), false);
    }
  }
  function watch(event) {
    event.preventDefault();
    clearInterval(timer);
    read();
    timer = setInterval(read, 1000);
  }
  if (rules.length === 0) line.textContent = "the policy has no quota rules";
  root.append(h("section", {}, form, rest), table);
}
