"use strict";
// ragjury report: builds the sample (or pair) table and its detail view from the data the
// page carries (gzip-compressed JSON in base64). Every text from documents and models goes
// in with textContent, never as HTML.
async function unpack(id) {
  const packed = document.getElementById(id).textContent.trim();
  const bytes = Uint8Array.from(atob(packed), (c) => c.charCodeAt(0));
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  return JSON.parse(await new Response(stream).text());
}

unpack("ragjury-data").then(start, (error) => {
  const note = document.getElementById("shown");
  note.textContent = "This browser could not read the report's data (" + error + "); use a current Chrome, Firefox, Safari or Edge.";
  throw error;
});

function start(data) {
  const $ = (id) => document.getElementById(id);

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value !== null && value !== undefined) node.setAttribute(key, value);
    }
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  const fmt = (x) => (x === null || x === undefined ? "–" : Number.isInteger(x) ? String(x) : x.toPrecision(3).replace(/\.?0+$/, ""));

  function badge(entry) {
    if (!entry) return el("span", { class: "muted" }, "–");
    if (entry.outcome === "failed") return el("span", { class: "badge bad", title: entry.reason || "" }, "failed");
    if (entry.outcome === "not_applicable") return el("span", { class: "badge na", title: entry.reason || "" }, "n/a");
    const cls = entry.passing === false ? "badge bad" : entry.passing === true ? "badge ok" : "badge";
    return el("span", { class: cls, title: entry.reason || "" }, fmt(entry.score));
  }

  // A sample's own verdict (the record's `passing`, never recomputed): a sample with a failed
  // judgement is "not judged", not passing.
  const failedMetrics = (s) => data.metrics.filter((name) => s.metrics[name] && s.metrics[name].outcome === "failed");

  function verdictOf(s) {
    if (s.passing === true) return { cls: "badge ok", text: "yes", words: "passing" };
    if (s.passing === false && failedMetrics(s).length) return { cls: "badge bad", text: "not judged", words: "not judged" };
    if (s.passing === false) return { cls: "badge bad", text: "no", words: "not passing" };
    return { cls: "badge na", text: "no verdict", words: "no verdict" };
  }

  function passingBadge(s) {
    const verdict = verdictOf(s);
    return el("span", { class: verdict.cls, title: s.reason || "" }, verdict.text);
  }

  function section(title, ...children) {
    return el("section", { class: "metric" }, el("h3", {}, title), ...children);
  }

  function textBlock(text, tag) {
    return el(tag || "p", { class: "text" }, text === null || text === undefined ? "" : String(text));
  }

  // ---- evaluation --------------------------------------------------------------------

  function contextWithMarks(text, marks) {
    const pre = el("pre", { class: "text" });
    let at = 0;
    for (const [start, end, statement] of marks) {
      pre.append(text.slice(at, start));
      pre.append(el("mark", { title: "evidence for statement " + (statement + 1) }, text.slice(start, end)));
      at = end;
    }
    pre.append(text.slice(at));
    return pre;
  }

  function errorView(error) {
    if (!error) return null;
    return el(
      "div",
      {},
      el("p", {}, "Stage ", el("code", {}, String(error.stage)), " · attempts " + error.attempts),
      textBlock(error.message),
      el("p", { class: "muted" }, "Last raw output"),
      textBlock(error.last_raw_output === null ? "(none)" : error.last_raw_output, "pre")
    );
  }

  const KNOWN = new Set(["outcome", "score", "passing", "reason", "error", "statements", "reasoning", "checks"]);
  const LABELS = { mrr: "MRR", ndcg: "nDCG" };
  const label = (key) => LABELS[key] || key.replaceAll("_", " ");
  const isRecord = (value) => value !== null && typeof value === "object" && !Array.isArray(value);

  function cellValue(value) {
    if (value === true || value === false) return el("span", { class: value ? "badge ok" : "badge bad" }, value ? "yes" : "no");
    if (value === null || value === undefined) return "–";
    if (typeof value === "number") return fmt(value);
    if (Array.isArray(value)) return value.map((v) => (typeof v === "number" ? fmt(v) : String(v))).join(", ");
    if (isRecord(value)) return Object.entries(value).filter(([, v]) => v !== null && v !== undefined).map(([k, v]) => label(k) + " " + (typeof v === "number" ? fmt(v) : String(v))).join(", ");
    return String(value);
  }

  // A small table for a detail that is a list of records (a verdict per context, the ranks
  // of references) or a record of records (figures at each k); a plain value as text.
  function detailTable(key, value) {
    let columns = [];
    let rows = [];
    let rowHead = null;
    if (Array.isArray(value) && value.length && value.every(isRecord)) {
      columns = [...new Set(value.flatMap((row) => Object.keys(row)))];
      rows = value.map((row) => [null, row]);
    } else if (isRecord(value) && Object.keys(value).length && Object.values(value).every(isRecord)) {
      columns = [...new Set(Object.values(value).flatMap((row) => Object.keys(row)))];
      rows = Object.entries(value).map(([k, row]) => [k, row]);
      rowHead = key.startsWith("at_") ? key.slice(3) : "";
    } else {
      return null;
    }
    const head = el("tr", {}, rowHead === null ? null : el("th", {}, rowHead), ...columns.map((c) => el("th", {}, label(c))));
    const body = el("tbody");
    for (const [k, row] of rows) {
      body.append(el("tr", {}, k === null ? null : el("th", { scope: "row" }, k), ...columns.map((c) => el("td", { class: typeof row[c] === "number" ? "num" : null }, cellValue(row[c])))));
    }
    return el("table", { class: "detail", "data-detail": key }, el("caption", {}, label(key)), el("thead", {}, head), body);
  }

  function metricView(name, entry) {
    const words = entry.outcome === "failed" ? "the judgement failed" : entry.outcome.replace("_", " ");
    const head = el("p", {}, badge(entry), " ", words, entry.passing === false ? " · not passing" : entry.passing === true ? " · passing" : "");
    const parts = [head];
    // a failure's reason is its error's message: shown once, with the error below
    if (entry.reason && !(entry.error && entry.error.message === entry.reason)) parts.push(textBlock(entry.reason));
    if (entry.statements && entry.statements.length) {
      const list = el("ol", { class: "statements" });
      for (const s of entry.statements) {
        list.append(
          el(
            "li",
            {},
            el("span", { class: s.supported ? "badge ok" : "badge bad" }, s.supported ? "supported" : "unsupported"),
            " ",
            s.text,
            el("br"),
            el("span", { class: "muted" }, "Reason: "),
            s.reason,
            s.evidence ? el("div", { class: "quote" }, "“" + s.evidence + "”") : null
          )
        );
      }
      parts.push(list);
    }
    if (entry.reasoning) parts.push(el("p", { class: "muted" }, "Reasoning"), textBlock(entry.reasoning));
    if (entry.checks && entry.checks.length) {
      const table = el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "check"), el("th", {}, "keyword"), el("th", {}, "result"))));
      const body = el("tbody");
      for (const c of entry.checks) {
        body.append(el("tr", {}, el("td", {}, c.type.replaceAll("_", " ")), el("td", {}, c.keyword), el("td", {}, el("span", { class: c.passed ? "badge ok" : "badge bad" }, c.passed ? "passed" : "failed"))));
      }
      table.append(body);
      parts.push(table);
    }
    const extra = Object.entries(entry).filter(([key, value]) => !KNOWN.has(key) && value !== null);
    const plain = [];
    const tables = [];
    for (const [key, value] of extra) {
      const table = detailTable(key, value);
      if (table) tables.push(table);
      else if (!(Array.isArray(value) && !value.length)) plain.push([key, value]);
    }
    if (plain.length) {
      const dl = el("dl", { class: "run" });
      for (const [key, value] of plain) dl.append(el("div", {}, el("dt", {}, label(key)), el("dd", {}, cellValue(value))));
      parts.push(dl);
    }
    for (const table of tables) parts.push(el("div", { class: "scroll" }, table));
    if (entry.error) parts.push(errorView(entry.error));
    return section(name, ...parts);
  }

  function verdictView(s) {
    const verdict = verdictOf(s);
    let reason = s.reason || "";
    for (const name of failedMetrics(s)) {
      const error = s.metrics[name].error;
      if (error && error.message && reason.includes(error.message)) reason = reason.replace(error.message, "its error is below, under " + name);
    }
    return el("div", { class: "verdict", id: "verdict" }, el("p", {}, el("span", { class: verdict.cls }, verdict.words)), reason ? el("p", { class: "reason" }, reason) : null);
  }

  function sampleDetail(s) {
    const parts = [el("h2", { id: "detail-title" }, "Sample ", el("code", {}, s.id)), verdictView(s), el("h3", {}, "Question"), textBlock(s.question), el("h3", {}, "Answer"), textBlock(s.answer === null ? "(no answer)" : s.answer)];
    if (s.reference) parts.push(el("h3", {}, "Reference"), textBlock(s.reference));
    if (s.contexts === null) {
      parts.push(el("p", { class: "muted" }, "Contexts are not in the results file; pass --samples to show them."));
    } else {
      parts.push(el("h3", {}, "Contexts ", el("span", { class: "muted" }, "(evidence of supported statements highlighted)")));
      s.contexts.forEach((text, i) => parts.push(contextWithMarks(text, s.marks[i] || [])));
    }
    for (const name of data.metrics) if (s.metrics[name]) parts.push(metricView(name, s.metrics[name]));
    return parts;
  }

  const evaluation = {
    rows: data.samples || [],
    searchText: (s) => [s.id, s.question, s.answer].join("\n").toLowerCase(),
    value(s, key) {
      if (key.startsWith("metric:")) {
        const entry = s.metrics[key.slice(7)];
        return entry && entry.outcome === "scored" ? entry.score : null;
      }
      if (key === "passing") return s.passing === null ? null : s.passing ? 1 : 0;
      return s[key];
    },
    // Filters pick whole samples. With a metric chosen, outcome and passing are that
    // metric's; with any metric, the outcome is one any of its metrics had, and passing is
    // the sample's own verdict.
    matches(s) {
      const metric = $("metric").value;
      const outcome = $("outcome").value;
      const passing = $("passing").value;
      if (metric && !s.metrics[metric]) return false;
      if (outcome) {
        const names = metric ? [metric] : data.metrics;
        if (!names.some((name) => s.metrics[name] && s.metrics[name].outcome === outcome)) return false;
      }
      if (passing) {
        const value = metric ? s.metrics[metric].passing : s.passing;
        const wanted = passing === "yes" ? true : passing === "no" ? false : null;
        if ((value === undefined ? null : value) !== wanted) return false;
      }
      return true;
    },
    cells(s) {
      return [el("td", { class: "id", title: s.id }, s.id), el("td", { class: "q", title: s.question || "" }, s.question || ""), ...data.metrics.map((name) => el("td", { class: "num" }, badge(s.metrics[name]))), el("td", { class: "verdict" }, passingBadge(s))];
    },
    detail: sampleDetail,
  };

  // ---- dataset -----------------------------------------------------------------------

  function pairDetail(p) {
    const parts = [el("h2", { id: "detail-title" }, "Pair ", el("code", {}, p.id), " ", el("span", { class: p.outcome === "kept" ? "badge ok" : p.outcome === "failed" ? "badge bad" : "badge na" }, p.outcome)), el("h3", {}, "Question"), textBlock(p.question), el("h3", {}, "Answer"), textBlock(p.answer), el("h3", {}, "Source"), el("p", {}, el("code", {}, p.source || ""))];
    for (const criterion of data.criteria) {
      const c = p.critiques[criterion];
      parts.push(section(criterion, c ? el("p", {}, el("span", { class: c.rating >= 4 ? "badge ok" : "badge bad" }, "rated " + c.rating)) : el("p", { class: "muted" }, "no critique arrived"), c ? textBlock(c.rationale) : null));
    }
    const check = p.answer_check;
    if (check) {
      const said = [el("h4", {}, "Its own answer, written without the drafted one"), textBlock(check.answer)];
      if (check.note) said.push(el("p", { class: "muted" }, check.note));
      parts.push(section("answer check", ...said));
    }
    if (p.error) parts.push(section("failure", errorView(p.error)));
    parts.push(el("h3", {}, "Context"), textBlock(p.context, "pre"));
    return parts;
  }

  const dataset = {
    rows: data.pairs || [],
    searchText: (p) => [p.id, p.question, p.answer, p.source].join("\n").toLowerCase(),
    value(p, key) {
      if (key.startsWith("rating:")) {
        const c = p.critiques[key.slice(7)];
        return c ? c.rating : null;
      }
      return p[key];
    },
    matches(p) {
      const outcome = $("outcome").value;
      return !outcome || p.outcome === outcome;
    },
    cells(p) {
      return [
        el("td", {}, p.id),
        el("td", { class: "q", title: p.question || "" }, p.question || ""),
        el("td", {}, p.source || ""),
        ...data.criteria.map((criterion) => {
          const c = p.critiques[criterion];
          return el("td", { class: "num" }, c ? el("span", { class: c.rating >= 4 ? "badge ok" : "badge bad", title: c.rationale }, String(c.rating)) : "–");
        }),
        el("td", {}, el("span", { class: p.outcome === "kept" ? "badge ok" : p.outcome === "failed" ? "badge bad" : "badge na" }, p.outcome)),
      ];
    },
    detail: pairDetail,
  };

  // ---- the table ---------------------------------------------------------------------

  const view = data.kind === "dataset" ? dataset : evaluation;
  const rows = view.rows.map((row, index) => ({ row, index, text: view.searchText(row) }));
  let sortKey = null;
  let sortDir = 1;

  function compare(a, b) {
    const x = view.value(a.row, sortKey);
    const y = view.value(b.row, sortKey);
    const xMissing = x === null || x === undefined;
    const yMissing = y === null || y === undefined;
    if (xMissing || yMissing) return xMissing === yMissing ? a.index - b.index : xMissing ? 1 : -1;
    if (typeof x === "number" && typeof y === "number") return (x - y) * sortDir || a.index - b.index;
    return String(x).localeCompare(String(y), undefined, { numeric: true }) * sortDir || a.index - b.index;
  }

  function render() {
    const query = $("search").value.trim().toLowerCase();
    let shown = rows.filter((r) => (!query || r.text.includes(query)) && view.matches(r.row));
    if (sortKey) shown = shown.slice().sort(compare);
    const body = document.querySelector("#samples tbody");
    const fragment = document.createDocumentFragment();
    for (const r of shown) {
      const tr = el("tr", { tabindex: "0", "data-index": String(r.index) }, ...view.cells(r.row));
      fragment.append(tr);
    }
    body.replaceChildren(fragment);
    $("shown").textContent = shown.length + " of " + rows.length + " shown";
  }

  function open(index) {
    const dialog = $("detail");
    $("detail-body").replaceChildren(...view.detail(view.rows[index]));
    if (!dialog.open) dialog.showModal();
    dialog.scrollTop = 0;
  }

  document.querySelector("#samples tbody").addEventListener("click", (event) => {
    const tr = event.target.closest("tr");
    if (tr) open(Number(tr.dataset.index));
  });
  document.querySelector("#samples tbody").addEventListener("keydown", (event) => {
    const tr = event.target.closest("tr");
    if (tr && (event.key === "Enter" || event.key === " ")) {
      event.preventDefault();
      open(Number(tr.dataset.index));
    }
  });
  for (const th of document.querySelectorAll("#samples th[data-key]")) {
    th.querySelector("button").addEventListener("click", () => {
      const key = th.dataset.key;
      sortDir = sortKey === key ? -sortDir : 1;
      sortKey = key;
      for (const other of document.querySelectorAll("#samples th[data-key]")) other.setAttribute("aria-sort", "none");
      th.setAttribute("aria-sort", sortDir === 1 ? "ascending" : "descending");
      render();
    });
  }
  const filters = $("filters");
  filters.addEventListener("input", render);
  filters.addEventListener("change", render);
  filters.addEventListener("submit", (event) => event.preventDefault());
  render();
  document.body.dataset.ready = "true";
}
