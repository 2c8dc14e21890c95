// Policy and quota rules: the policy in service, a quota rule's form (the fields of `tollgate quotas set`)
// and the whole document's editor (`tollgate policy upload`); each save names what it opened, so a save
// after another editor's is refused ("changed since you opened it") rather than lost.
import { field, h, showProblems, status } from "../dom.js";

export async function render(root, api) {
  const state = await api("policy");
  const limitsText = (rule) => rule.limits.map((l) => `${l.windowMs / 1000}s=${l.max}`).join(" ");

  // the rule form
  const inputs = {
    name: h("input", { type: "text", placeholder: "api-calls", autocomplete: "off" }),
    mode: h(
      "select",
      {},
      h("option", { value: "strict" }, "strict"),
      h("option", { value: "approximate" }, "approximate"),
    ),
    limits: h("input", { type: "text", placeholder: "1s=100 60s=3000", autocomplete: "off" }),
    leaseMs: h("input", { type: "text", placeholder: "default", inputmode: "numeric" }),
    fallback: h(
      "select",
      {},
      h("option", { value: "" }, "default"),
      ...["deny", "allow", "share"].map((v) => h("option", { value: v }, v)),
    ),
    slotGroups: h("input", { type: "text", placeholder: "default", inputmode: "numeric" }),
  };
  const tenantBoxes = state.tenants.map((name) => h("input", { type: "checkbox", value: name }));
  const tenants = h(
    "fieldset",
    { id: "field-tenants" },
    h("legend", {}, "grant to tenants"),
    ...tenantBoxes.map((box) => h("label", {}, box, box.value)),
    h("span", { class: "field-error", id: "error-tenants" }),
  );
  let openedRule = null;
  const ruleStatus = h("p", { class: "status", role: "status" });
  const ruleRest = h("ul", { class: "problems" });
  const ruleForm = h(
    "form",
    { "aria-label": "quota rule", onsubmit: (event) => saveRule(event) },
    field("name", "name", inputs.name),
    field("mode", "mode", inputs.mode),
    field("limits (window=max …)", "limits", inputs.limits),
    field("lease ms", "leaseMs", inputs.leaseMs),
    field("fallback", "fallback", inputs.fallback),
    field("slot groups", "slotGroups", inputs.slotGroups),
    tenants,
    h("div", { class: "actions" }, h("button", { type: "submit" }, "Save rule"), ruleStatus),
  );

  function open(rule) {
    openedRule = rule?.opened ?? null;
    inputs.name.value = rule?.name ?? "";
    inputs.name.readOnly = rule !== undefined;
    inputs.mode.value = rule?.rule.mode ?? "strict";
    inputs.limits.value = rule ? limitsText(rule.rule) : "";
    inputs.leaseMs.value = rule ? String(rule.rule.leaseMs) : "";
    inputs.fallback.value = rule?.rule.fallback ?? "";
    inputs.slotGroups.value = rule ? String(rule.rule.slotGroups) : "";
    for (const box of tenantBoxes) box.checked = rule?.tenants.includes(box.value) ?? false;
    showProblems(ruleForm, [], ruleRest);
    ruleStatus.textContent = rule ? `editing ${rule.name} as opened` : "a new rule";
  }

  async function saveRule(event) {
    event.preventDefault();
    try {
      const saved = await api("policy/rule", {
        name: inputs.name.value,
        mode: inputs.mode.value,
        limits: inputs.limits.value,
        leaseMs: inputs.leaseMs.value,
        fallback: inputs.fallback.value,
        slotGroups: inputs.slotGroups.value,
        tenants: tenantBoxes.filter((box) => box.checked).map((box) => box.value),
        openedRule,
      });
      showProblems(ruleForm, [], ruleRest);
      status(ruleStatus, `saved as policy ${saved.version}; ${saved.note}`, true);
      await reload();
    } catch (error) {
      const problems = error.problems ?? [];
      showProblems(ruleForm, problems, ruleRest);
      status(
        ruleStatus,
        problems.length > 0 ? "nothing saved: see the fields marked" : (error.error ?? String(error)),
        false,
      );
    }
  }

  async function removeRule(rule) {
    try {
      const removed = await api("policy/rule/remove", { name: rule.name, openedRule: rule.opened });
      status(ruleStatus, `removed ${rule.name}: policy ${removed.version}; ${removed.note}`, true);
      await reload();
    } catch (error) {
      status(ruleStatus, error.error ?? String(error), false);
    }
  }

  // the whole document
  const editor = h("textarea", { rows: 18, spellcheck: "false", "aria-label": "policy JSON" });
  editor.value = state.text ?? "";
  let openedText = state.text;
  const documentStatus = h("p", { class: "status", role: "status" });
  const documentProblems = h("ul", { class: "problems", "aria-label": "policy problems" });
  const documentForm = h(
    "form",
    { class: "document", onsubmit: (event) => saveDocument(event) },
    h("div", { class: "actions" }, h("button", { type: "submit" }, "Save policy"), documentStatus),
  );
  async function saveDocument(event) {
    event.preventDefault();
    try {
      const saved = await api("policy", { text: editor.value, openedText });
      documentProblems.replaceChildren();
      editor.removeAttribute("aria-invalid");
      status(documentStatus, `saved as policy ${saved.version}; ${saved.note}`, true);
      await reload();
    } catch (error) {
      documentProblems.replaceChildren(
        ...(error.problems ?? []).map((p) => h("li", {}, p.field ? `${p.field}: ${p.message}` : p.message)),
      );
      editor.setAttribute("aria-invalid", "true");
      status(documentStatus, error.error ?? String(error), false);
    }
  }

  const summary = h("section", { "aria-label": "policy in service" });
  const rulesTable = h("section", { "aria-label": "quota rules" });
  function draw(current) {
    const policy = current.policy;
    summary.replaceChildren(
      h("h2", {}, policy ? `Policy ${policy.version}` : current.text ? "Policy (does not validate)" : "No policy yet"),
      policy
        ? h(
            "table",
            {},
            h("tr", {}, h("th", {}, "segment"), ...policy.channels.map((c) => h("th", {}, c))),
            ...policy.segments.map((segment) =>
              h(
                "tr",
                {},
                h("td", {}, segment.name),
                ...segment.caps.map((c) => h("td", {}, c.caps.join(", ") || h("span", { class: "muted" }, "no cap"))),
              ),
            ),
          )
        : "",
    );
    rulesTable.replaceChildren(
      h("h2", {}, "Quota rules"),
      h(
        "table",
        {},
        h(
          "tr",
          {},
          ...["rule", "mode", "limits", "lease ms", "fallback", "slot groups", "tenants", ""].map((t) =>
            h("th", {}, t),
          ),
        ),
        ...current.rules.map((rule) =>
          h(
            "tr",
            { "data-rule": rule.name },
            h("td", {}, rule.name),
            h("td", {}, rule.rule.mode),
            h("td", {}, limitsText(rule.rule)),
            h("td", {}, rule.rule.leaseMs),
            h("td", {}, rule.rule.fallback),
            h("td", {}, rule.rule.slotGroups),
            h("td", {}, rule.tenants.join(", ")),
            h(
              "td",
              {},
              h("button", { type: "button", class: "secondary", onclick: () => open(rule) }, `Edit ${rule.name}`),
              " ",
              h(
                "button",
                { type: "button", class: "secondary", onclick: () => removeRule(rule) },
                `Remove ${rule.name}`,
              ),
            ),
          ),
        ),
      ),
      h("button", { type: "button", class: "secondary", onclick: () => open(undefined) }, "New rule"),
    );
  }
  async function reload() {
    const current = await api("policy");
    draw(current);
    // what a later save is made against: the policy as it is now
    openedText = current.text;
    editor.value = current.text ?? "";
    const again = current.rules.find((rule) => rule.name === inputs.name.value);
    openedRule = again?.opened ?? null;
  }

  draw(state);
  open(undefined);
  root.append(
    summary,
    rulesTable,
    h("section", {}, h("h2", {}, "Quota rule"), ruleForm, ruleRest),
    h("section", {}, h("h2", {}, "Policy document"), editor, documentProblems, documentForm),
  );
}
