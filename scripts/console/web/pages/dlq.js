// Dead letters: the campaign DLQ with each letter's reason and field, and a redrive of those chosen back to
// the campaign queue.
import { h, iso, status } from "../dom.js";

export async function render(root, api) {
  const line = h("p", { class: "status", role: "status" });
  const list = h("section", { "aria-label": "dead letters" });
  let boxes = [];
  async function load() {
    const { queueUrl, letters } = await api("dlq");
    boxes = letters.map((letter) =>
      h("input", { type: "checkbox", value: letter.messageId, "aria-label": `choose ${letter.messageId}` }),
    );
    list.replaceChildren(
      h("h2", {}, `${letters.length} dead letters`),
      h("p", { class: "muted" }, queueUrl),
      h(
        "table",
        {},
        h(
          "tr",
          {},
          ...["", "message", "reached the DLQ", "campaign", "error", "field", "reason"].map((t) => h("th", {}, t)),
        ),
        ...letters.map((letter, i) =>
          h(
            "tr",
            { "data-message-id": letter.messageId },
            h("td", {}, boxes[i]),
            h("td", {}, letter.messageId),
            h("td", {}, iso(letter.sentAt)),
            h(
              "td",
              {},
              letter.campaignId === undefined
                ? "(not a campaign batch)"
                : `${letter.campaignId} ${letter.channel ?? "?"} ${letter.users ?? "?"} users`,
            ),
            h("td", {}, letter.error),
            h("td", {}, letter.path || "-"),
            h("td", {}, letter.reason),
          ),
        ),
      ),
    );
  }
  async function redrive() {
    const messageIds = boxes.filter((box) => box.checked).map((box) => box.value);
    try {
      const reply = await api("dlq/redrive", { messageIds });
      status(
        line,
        `${reply.redriven.length} redriven to the campaign queue${reply.missing.length ? `; not found: ${reply.missing.join(", ")}` : ""}`,
        reply.missing.length === 0,
      );
      await load();
    } catch (error) {
      status(line, error.error ?? String(error), false);
    }
  }
  await load();
  root.append(
    list,
    h("div", { class: "actions" }, h("button", { type: "button", onclick: redrive }, "Redrive chosen"), line),
  );
}
