// A few DOM helpers for the pages: elements from a tag, attributes and children; problems shown beside
// the fields they name.

/** `h("td", { class: "x" }, "text", child)`: an element; `on*` attributes are listeners. */
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

const SVG = "http://www.w3.org/2000/svg";
export function svg(tag, attributes = {}, ...children) {
  const element = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) element.setAttribute(name, String(value));
  for (const child of children.flat()) element.append(child instanceof Node ? child : document.createTextNode(child));
  return element;
}

/** A labelled field with the place its problem is shown: `field` is the name the server's problems use. */
export function field(label, field, control) {
  control.name = field;
  control.id = `field-${field}`;
  control.setAttribute("aria-describedby", `error-${field}`);
  return h("label", { for: control.id }, label, control, h("span", { class: "field-error", id: `error-${field}` }));
}

/**
 * Shows each problem next to its field (a problem of "limits[0].max" beside "limits"); those of no field
 * in the form go to `rest`. Clears what an earlier attempt showed.
 */
export function showProblems(form, problems, rest) {
  for (const error of form.querySelectorAll(".field-error")) error.textContent = "";
  for (const control of form.querySelectorAll("[aria-invalid]")) control.removeAttribute("aria-invalid");
  const unplaced = [];
  for (const problem of problems) {
    const name = problem.field.split(/[.[]/)[0];
    const error = name ? form.querySelector(`#error-${CSS.escape(name)}`) : null;
    if (!error) {
      unplaced.push(problem);
      continue;
    }
    error.textContent = `${problem.field}: ${problem.message}`;
    form.querySelector(`#field-${CSS.escape(name)}`)?.setAttribute("aria-invalid", "true");
  }
  rest.replaceChildren(...unplaced.map((p) => h("li", {}, p.field ? `${p.field}: ${p.message}` : p.message)));
}

/** A status line: ok (green) or error (red). */
export function status(element, text, ok) {
  element.textContent = text;
  element.className = `status ${ok ? "ok" : "error"}`;
}

export const iso = (ms) => new Date(ms).toISOString();
