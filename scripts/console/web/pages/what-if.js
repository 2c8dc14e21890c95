// What-if: a campaign decided now against the live caps, nothing written: per segment allowed, capped by
// cap, repeats and deferred, and when the capped users are eligible again (`tollgate campaign what-if`).
import { field, h, iso, showProblems, status } from "../dom.js";

const count = (n) => n.toLocaleString("en-US");

function eligible(histogram) {
  if (histogram.read === 0) return "";
  const cells = [
    ...histogram.buckets.map((b) => [`≤ ${b.label}`, b.users]),
    ["later", histogram.later],
    ["never", histogram.never],
  ];
  return h(
    "table",
    { "aria-label": "eligible again" },
    h("tr", {}, ...cells.map(([label]) => h("th", {}, label))),
    h("tr", {}, ...cells.map(([, n]) => h("td", {}, count(n)))),
  );
}

export async function render(root, api) {
  const campaign = h("input", { type: "text", placeholder: "summer-sale", autocomplete: "off" });
  const channel = h("input", { type: "text", placeholder: "push" });
  const range = h("input", { type: "text", placeholder: "0-999999" });
  const at = h("input", { type: "text", inputmode: "numeric", placeholder: "now (ms since the epoch)" });
  const line = h("p", { class: "status", role: "status" });
  const rest = h("ul", { class: "problems" });
  const answer = h("section", { "aria-label": "prediction" });
  const form = h(
    "form",
    { "aria-label": "what-if", onsubmit: (event) => ask(event) },
    field("campaign", "campaign", campaign),
    field("channel", "channel", channel),
    field("users", "range", range),
    field("send time", "at", at),
    h("div", { class: "actions" }, h("button", { type: "submit" }, "Predict"), line),
  );
  async function ask(event) {
    event.preventDefault();
    const query = new URLSearchParams({ campaign: campaign.value, channel: channel.value, range: range.value });
    if (at.value) query.set("at", at.value);
    status(line, "deciding in peek mode…", true);
    try {
      const { report, text } = await api(`what-if?${query}`);
      showProblems(form, [], rest);
      line.textContent = "";
      answer.replaceChildren(
        h(
          "h2",
          {},
          `${report.campaignId} on ${report.channel} at ${iso(report.at)}: ${count(report.users)} users, nothing written`,
        ),
        h(
          "p",
          { class: "muted" },
          `policy ${report.policyVersion}; deferred: held by quiet hours until they end; held: in quiet hours and not sent`,
        ),
        h(
          "table",
          {},
          h(
            "tr",
            {},
            ...["segment", "users", "allowed", "capped", "capped by", "repeats", "deferred", "held"].map((t) =>
              h("th", {}, t),
            ),
          ),
          ...report.segments.map((s) =>
            h(
              "tr",
              { "data-segment": s.segment },
              h("td", {}, s.segment),
              h("td", {}, count(s.users)),
              h("td", {}, count(s.allowed + s.exempt)),
              h("td", {}, count(s.capped)),
              h(
                "td",
                {},
                Object.entries(s.cappedBy)
                  .map(([cap, n]) => `${cap}: ${count(n)}`)
                  .join(", "),
              ),
              h("td", {}, count(s.duplicate)),
              h("td", {}, count(s.deferred)),
              h("td", {}, count(s.quiet + s.dropped)),
            ),
          ),
        ),
        ...report.segments
          .filter((s) => s.eligibleAt.read > 0)
          .map((s) =>
            h(
              "div",
              { "data-eligible": s.segment },
              h(
                "h3",
                {},
                `${s.segment}: eligible again (${count(s.eligibleAt.read)} of ${count(s.eligibleAt.of)} capped read)`,
              ),
              eligible(s.eligibleAt),
            ),
          ),
        h("pre", {}, text),
      );
    } catch (error) {
      showProblems(form, error.problems ?? [], rest);
      status(line, error.error ?? String(error), false);
    }
  }
  root.append(h("section", {}, form, rest), answer);
}
