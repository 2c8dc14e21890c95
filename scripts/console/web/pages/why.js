// Why: a user's latest decision (of a campaign, on a channel) and, for each cap of it, the sends that
// filled its window: `tollgate why`'s answer.
import { field, h, iso, showProblems, status } from "../dom.js";

export async function render(root, api) {
  const user = h("input", { type: "text", inputmode: "numeric", placeholder: "17", autocomplete: "off" });
  const campaign = h("input", { type: "text", placeholder: "any campaign" });
  const channel = h("input", { type: "text", placeholder: "any channel" });
  const line = h("p", { class: "status", role: "status" });
  const rest = h("ul", { class: "problems" });
  const answer = h("section", { "aria-label": "answer" });
  const form = h(
    "form",
    { "aria-label": "why", onsubmit: (event) => ask(event) },
    field("user", "user", user),
    field("campaign", "campaign", campaign),
    field("channel", "channel", channel),
    h("div", { class: "actions" }, h("button", { type: "submit" }, "Why?"), line),
  );
  async function ask(event) {
    event.preventDefault();
    const query = new URLSearchParams({ user: user.value });
    if (campaign.value) query.set("campaign", campaign.value);
    if (channel.value) query.set("channel", channel.value);
    try {
      const reply = await api(`why?${query}`);
      showProblems(form, [], rest);
      line.textContent = "";
      if (!reply.answer) return answer.replaceChildren(h("p", {}, reply.text));
      const d = reply.answer.decision;
      answer.replaceChildren(
        h(
          "h2",
          { "data-decision": d.decision },
          `user ${d.userId}: ${d.decision} at ${iso(d.at)}`,
          d.campaignId ? ` (campaign ${d.campaignId}, ${d.channel})` : ` (${d.channel})`,
        ),
        h("p", { class: "muted" }, `segment ${d.segment}, policy ${d.policyVersion ?? "?"}`),
        ...reply.answer.caps.map((cap) =>
          h(
            "div",
            { "data-cap": cap.cap },
            h(
              "p",
              {},
              h("strong", {}, cap.bit ? `capped by ${cap.cap}` : `cap ${cap.cap}`),
              ` (max ${cap.max}): ${cap.before} sends in the window before, ${cap.after} after`,
            ),
            cap.sends.length === 0
              ? ""
              : h(
                  "table",
                  {},
                  h("tr", {}, h("th", {}, "sent at"), h("th", {}, "campaign"), h("th", {}, "channel")),
                  ...cap.sends.map((s) =>
                    h("tr", {}, h("td", {}, iso(s.at)), h("td", {}, s.campaignId ?? "(check)"), h("td", {}, s.channel)),
                  ),
                ),
          ),
        ),
        h("pre", {}, reply.text),
      );
    } catch (error) {
      showProblems(form, error.problems ?? [], rest);
      status(line, error.error ?? String(error), false);
    }
  }
  root.append(h("section", {}, form, rest), answer);
}
