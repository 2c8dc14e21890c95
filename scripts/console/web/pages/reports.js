// Campaign reports: the archived campaigns, and one campaign's sends by segment as a table and an SVG bar
// chart (sent, capped and repeats stacked per segment).
import { h, iso, status, svg } from "../dom.js";

function chart(report) {
  const rowHeight = 28;
  const labelWidth = 120;
  const barWidth = 520;
  const largest = Math.max(1, ...report.segments.map((s) => s.sent + s.capped + s.duplicate));
  const rows = report.segments.map((s, i) => {
    const y = i * rowHeight + 4;
    let x = labelWidth;
    const bars = [
      ["sent", s.sent, "bar"],
      ["capped", s.capped, "bar capped"],
      ["repeats", s.duplicate, "bar repeat"],
    ].map(([name, n, cls]) => {
      const width = (barWidth * n) / largest;
      const rect = svg(
        "rect",
        { x, y, width, height: rowHeight - 8, class: cls },
        svg("title", {}, `${s.segment} ${name}: ${n}`),
      );
      x += width;
      return rect;
    });
    return svg(
      "g",
      {},
      svg("text", { x: 0, y: y + rowHeight / 2, "font-size": 12 }, s.segment),
      ...bars,
      svg(
        "text",
        { x: x + 6, y: y + rowHeight / 2, "font-size": 11, fill: "#4a5568" },
        `${s.sent} sent, ${s.capped} capped`,
      ),
    );
  });
  const height = report.segments.length * rowHeight + 30;
  return svg(
    "svg",
    {
      viewBox: `0 0 ${labelWidth + barWidth + 160} ${height}`,
      width: "100%",
      role: "img",
      "aria-label": `chart of ${report.campaignId}`,
    },
    ...rows,
    ...[
      ["sent", "bar"],
      ["capped", "bar capped"],
      ["repeats", "bar repeat"],
    ].map(([name, cls], i) =>
      svg(
        "g",
        {},
        svg("rect", { x: labelWidth + i * 110, y: height - 18, width: 12, height: 12, class: cls }),
        svg("text", { x: labelWidth + i * 110 + 18, y: height - 8, "font-size": 12 }, name),
      ),
    ),
  );
}

export async function render(root, api) {
  const { campaigns } = await api("reports");
  const line = h("p", { class: "status", role: "status" });
  const shown = h("section", { "aria-label": "report" });
  async function show(campaignId) {
    try {
      const report = await api(`reports/campaign?${new URLSearchParams({ campaign: campaignId })}`);
      shown.replaceChildren(
        h("h2", {}, `Campaign ${report.campaignId}`),
        chart(report),
        h(
          "table",
          {},
          h("tr", {}, ...["segment", "sent", "capped", "repeats", "capped by"].map((t) => h("th", {}, t))),
          ...report.segments.map((s) =>
            h(
              "tr",
              { "data-segment": s.segment },
              h("td", {}, s.segment),
              h("td", {}, s.sent),
              h("td", {}, s.capped),
              h("td", {}, s.duplicate),
              h(
                "td",
                {},
                Object.entries(s.cappedBy)
                  .map(([cap, n]) => `${cap}: ${n}`)
                  .join(", ") || "-",
              ),
            ),
          ),
          h(
            "tr",
            {},
            h("th", {}, "total"),
            h("th", {}, report.total.sent),
            h("th", {}, report.total.capped),
            h("th", {}, report.total.duplicate),
            h("th", {}),
          ),
        ),
      );
      line.textContent = "";
    } catch (error) {
      status(line, error.error ?? String(error), false);
    }
  }
  root.append(
    h(
      "section",
      { "aria-label": "campaigns" },
      h("h2", {}, "Archived campaigns"),
      campaigns.length === 0
        ? h("p", { class: "muted" }, "the archive holds no campaign decision yet")
        : h(
            "table",
            {},
            h("tr", {}, h("th", {}, "campaign"), h("th", {}, "last decision")),
            ...campaigns.map((c) =>
              h(
                "tr",
                {},
                h(
                  "td",
                  {},
                  h("button", { type: "button", class: "secondary", onclick: () => show(c.campaignId) }, c.campaignId),
                ),
                h("td", {}, iso(c.lastDecidedAt)),
              ),
            ),
          ),
      line,
    ),
    shown,
  );
  if (campaigns[0]) await show(campaigns[0].campaignId);
}
