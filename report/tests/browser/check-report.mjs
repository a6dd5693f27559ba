// Opens an mgbench HTML report in a real browser (Debian's chromium-headless-shell, driven by
// playwright-core with executablePath: no browser download) and checks what a reader sees:
//
//   - no console error or warning and no page error;
//   - no request other than file: and data: (the page must be self-contained);
//   - every figure (svg[data-fig]) drawn: data-n > 0 data marks (.mark) and exactly data-n of
//     them, a non-zero rendered size, non-empty axis labels, and every text inside the
//     viewBox;
//   - a screenshot that is not blank (share of pixels that differ from the background).
//
//   node check-report.mjs REPORT.html [--screenshot OUT.png] [--figures DIR]
//
// --figures DIR saves a PNG of every figure as DIR/<data-fig>.png.
//
// Prints a JSON summary; exits 1 with the problems found, 2 when the browser cannot start.

import { chromium } from 'playwright-core';
import { pathToFileURL } from 'node:url';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';

const args = process.argv.slice(2);
const report = args.find((a, i) => !a.startsWith('--') && !['--screenshot', '--figures'].includes(args[i - 1]));
const shotAt = args.indexOf('--screenshot');
const shotPath = shotAt >= 0 ? args[shotAt + 1] : null;
const figAt = args.indexOf('--figures');
const figDir = figAt >= 0 ? args[figAt + 1] : null;
if (!report || !existsSync(report)) {
  console.error(`check-report: no report file given or found (${report ?? 'none'})`);
  process.exit(2);
}
const executablePath = process.env.MGBENCH_CHROMIUM || '/usr/bin/chromium-headless-shell';
if (!existsSync(executablePath)) {
  console.error(
    `check-report: ${executablePath} not found: install Debian's chromium-headless-shell (scripts/setup.sh does) or set MGBENCH_CHROMIUM`,
  );
  process.exit(2);
}

const problems = [];
let browser;
try {
  browser = await chromium.launch({
    executablePath,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
} catch (e) {
  console.error(`check-report: cannot start ${executablePath}: ${e.message}`);
  process.exit(2);
}
const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
page.on('console', (m) => {
  if (m.type() === 'error' || m.type() === 'warning') {
    problems.push(`console ${m.type()}: ${m.text()}`);
  }
});
page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
page.on('request', (r) => {
  const url = r.url();
  if (!url.startsWith('file:') && !url.startsWith('data:')) {
    problems.push(`request to ${url}: the report must not load anything`);
  }
});
const url = pathToFileURL(resolve(report)).href;
await page.goto(url, { waitUntil: 'load' });

const figures = await page.evaluate(() => {
  const out = [];
  for (const svg of document.querySelectorAll('svg[data-fig]')) {
    const id = svg.getAttribute('data-fig');
    const n = Number(svg.getAttribute('data-n'));
    const marks = svg.querySelectorAll('.mark').length;
    const rect = svg.getBoundingClientRect();
    const vb = svg.viewBox.baseVal;
    const labels = [...svg.querySelectorAll('.axis-label')].map((t) => t.textContent);
    const outside = [];
    const ticks = [];
    const refLabels = [];
    for (const t of svg.querySelectorAll('text')) {
      if (!t.textContent.trim()) continue;
      const b = t.getBBox();
      // getBBox is in the text's own user space; account for a rotate() transform.
      const m = t.getCTM();
      const s = svg.getCTM();
      let box = b;
      if (m && s) {
        const inv = s.inverse().multiply(m);
        const pts = [
          [b.x, b.y],
          [b.x + b.width, b.y],
          [b.x, b.y + b.height],
          [b.x + b.width, b.y + b.height],
        ].map(([x, y]) => new DOMPoint(x, y).matrixTransform(inv));
        const xs = pts.map((p) => p.x);
        const ys = pts.map((p) => p.y);
        box = {
          x: Math.min(...xs),
          y: Math.min(...ys),
          width: Math.max(...xs) - Math.min(...xs),
          height: Math.max(...ys) - Math.min(...ys),
        };
      }
      if (t.classList.contains('tick')) ticks.push({ text: t.textContent, box });
      if (t.classList.contains('ref-label')) refLabels.push({ text: t.textContent, box });
      const tol = 1.5;
      if (
        box.x < vb.x - tol ||
        box.y < vb.y - tol ||
        box.x + box.width > vb.x + vb.width + tol ||
        box.y + box.height > vb.y + vb.height + tol
      ) {
        outside.push(`"${t.textContent}" at ${box.x.toFixed(1)},${box.y.toFixed(1)} ${box.width.toFixed(1)}x${box.height.toFixed(1)}`);
      }
    }
    // Tick labels that run into each other (bins too narrow for their names) cannot be read.
    const overlaps = [];
    for (let i = 0; i < ticks.length; i++) {
      for (let j = i + 1; j < ticks.length; j++) {
        const a = ticks[i].box;
        const b = ticks[j].box;
        const w = Math.min(a.x + a.width, b.x + b.width) - Math.max(a.x, b.x);
        const h = Math.min(a.y + a.height, b.y + b.height) - Math.max(a.y, b.y);
        if (w > 1 && h > 1) overlaps.push(`"${ticks[i].text}" and "${ticks[j].text}"`);
      }
    }
    // A reference line's label under the legend's box cannot be read.
    const legend = svg.querySelector('g.legend > rect');
    const hidesData = [];
    if (legend) {
      // The legend must not hide more data marks than the emptiest of the frame's corners and
      // middles of its sides would.
      const ink = [];
      for (const m of svg.querySelectorAll('.mark')) {
        if (m.tagName === 'polyline') {
          const p = [...m.points].map((q) => [q.x, q.y]);
          for (let i = 0; i < p.length; i++) ink.push({ seg: [p[Math.max(0, i - 1)], p[i]] });
        } else if (m.tagName === 'line') {
          ink.push({ seg: [[m.x1.baseVal.value, m.y1.baseVal.value], [m.x2.baseVal.value, m.y2.baseVal.value]] });
        } else {
          const b = (m.tagName === 'g' ? m.querySelector('rect') : m).getBBox();
          ink.push({ box: [b.x, b.y, b.x + b.width, b.y + b.height] });
        }
      }
      const meets = (k, [x0, y0, x1, y1]) => {
        if (k.box) return k.box[0] <= x1 && k.box[2] >= x0 && k.box[1] <= y1 && k.box[3] >= y0;
        const [[ax, ay], [bx, by]] = k.seg;
        let lo = 0;
        let hi = 1;
        for (const [p, q] of [[ax - bx, ax - x0], [bx - ax, x1 - ax], [ay - by, ay - y0], [by - ay, y1 - ay]]) {
          if (p === 0) {
            if (q < 0) return false;
          } else if (p < 0) lo = Math.max(lo, q / p);
          else hi = Math.min(hi, q / p);
        }
        return lo <= hi;
      };
      const lb = legend.getBBox();
      const frame = svg.querySelector(':scope > rect').getBBox();
      const hidden = (x, y) => ink.filter((k) => meets(k, [x - 1, y - 1, x + lb.width + 1, y + lb.height + 1])).length;
      const xs = [frame.x + 4, frame.x + (frame.width - lb.width) / 2, frame.x + frame.width - lb.width - 4];
      const ys = [frame.y + 4, frame.y + (frame.height - lb.height) / 2, frame.y + frame.height - lb.height - 4];
      const places = xs.flatMap((x, i) => ys.filter((_, j) => i !== 1 || j !== 1).map((y) => [x, y]));
      const least = Math.min(...places.map(([x, y]) => hidden(x, y)));
      const here = hidden(lb.x, lb.y);
      if (here > least) hidesData.push(`it hides ${here} data mark(s) where another place would hide ${least}`);
      const a = lb;
      for (const r of refLabels) {
        const b = r.box;
        const w = Math.min(a.x + a.width, b.x + b.width) - Math.max(a.x, b.x);
        const h = Math.min(a.y + a.height, b.y + b.height) - Math.max(a.y, b.y);
        if (w > 1 && h > 1) overlaps.push(`"${r.text}" and the legend`);
      }
    }
    out.push({
      id,
      n,
      overlaps,
      hidesData,
      marks,
      width: rect.width,
      height: rect.height,
      children: svg.childElementCount,
      labels,
      outside,
    });
  }
  return out;
});

if (figures.length === 0) problems.push('no figure (svg[data-fig]) in the page');
for (const f of figures) {
  if (f.children === 0) problems.push(`figure ${f.id}: empty svg`);
  if (!(f.n > 0)) problems.push(`figure ${f.id}: data-n is ${f.n}, nothing drawn`);
  if (f.marks !== f.n) problems.push(`figure ${f.id}: ${f.marks} marks drawn but data-n says ${f.n}`);
  if (!(f.width > 0 && f.height > 0)) problems.push(`figure ${f.id}: rendered ${f.width}x${f.height}`);
  if (f.labels.length === 0 || f.labels.every((l) => !l.trim())) {
    problems.push(`figure ${f.id}: no axis label`);
  }
  for (const o of f.outside) problems.push(`figure ${f.id}: text outside the viewBox: ${o}`);
  for (const o of f.overlaps) problems.push(`figure ${f.id}: labels overlap: ${o}`);
  for (const o of f.hidesData) problems.push(`figure ${f.id}: the legend is over data: ${o}`);
}

if (figDir) {
  mkdirSync(figDir, { recursive: true });
  for (const f of figures) {
    await page.locator(`svg[data-fig="${f.id}"]`).screenshot({ path: `${figDir}/${f.id}.png` });
  }
}

// A screenshot that is not blank: the share of pixels that are not the background.
const shot = await page.screenshot({ fullPage: true });
if (shotPath) writeFileSync(shotPath, shot);
const check = await browser.newPage();
const inked = await check.evaluate(async (b64) => {
  const img = new Image();
  img.src = `data:image/png;base64,${b64}`;
  await img.decode();
  const c = document.createElement('canvas');
  c.width = img.width;
  c.height = img.height;
  const ctx = c.getContext('2d');
  ctx.drawImage(img, 0, 0);
  const d = ctx.getImageData(0, 0, c.width, c.height).data;
  let ink = 0;
  for (let i = 0; i < d.length; i += 4) {
    if (d[i] < 235 || d[i + 1] < 235 || d[i + 2] < 235) ink++;
  }
  return { ink: ink / (d.length / 4), width: c.width, height: c.height };
}, shot.toString('base64'));
if (!(inked.ink > 0.01)) {
  problems.push(`screenshot is blank: ${(100 * inked.ink).toFixed(2)}% of pixels are not background`);
}
await browser.close();

const summary = {
  report,
  figures: figures.length,
  marks: figures.reduce((a, f) => a + f.marks, 0),
  screenshot: { width: inked.width, height: inked.height, inked_share: inked.ink },
  problems,
};
console.log(JSON.stringify(summary, null, 2));
process.exit(problems.length ? 1 : 0);
