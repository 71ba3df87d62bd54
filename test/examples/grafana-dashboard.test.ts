// examples/grafana/tidemark.json may only query series that the Prometheus
// adapter (tidemark/prometheus) registers, with labels those series carry,
// and must use every series it registers: read from a real registry, so a
// renamed or a new series fails here instead of leaving an empty panel.
import { readFileSync } from 'node:fs'
import { describe, expect, it, onTestFinished } from 'vitest'
import { createPrometheusMetrics } from '../../connectors/prometheus/index.js'
import { OWNERSHIP_EVENTS, RESTORE_SOURCES, SNAPSHOT_OUTCOMES } from '../../src/index.js'

interface Target { expr: string }
interface Panel { id: number; type: string; title: string; datasource?: { uid: string }; targets?: Target[]; gridPos: { x: number; w: number } }
interface Dashboard { panels: Panel[]; templating: { list: Array<{ name: string; type: string; query: unknown }> } }

const dashboard = JSON.parse(readFileSync(new URL('../../examples/grafana/tidemark.json', import.meta.url), 'utf8')) as Dashboard

/** Every PromQL expression of the dashboard: the panels' targets and the variables' queries, with where each is. */
function expressions(): Array<{ where: string; expr: string }> {
  const out = dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => ({ where: `panel "${p.title}"`, expr: t.expr })))
  for (const v of dashboard.templating.list) {
    if (v.type === 'query') out.push({ where: `variable $${v.name}`, expr: (v.query as { query: string }).query })
  }
  return out
}

/** The adapter's families, from a real registry: each series name a query may use (histograms: _bucket, _sum, _count), its family and labels. */
function exportedSeries(): Map<string, { family: string; labels: string[] }> {
  const metrics = createPrometheusMetrics()
  onTestFinished(() => metrics.close())
  const series = new Map<string, { family: string; labels: string[] }>()
  for (const metric of metrics.registry.getMetricsAsArray()) {
    const { name, labelNames } = metric as unknown as { name: string; labelNames: string[] }
    const type = (metric as unknown as { type: string }).type
    const names = type === 'histogram' ? [`${name}_bucket`, `${name}_sum`, `${name}_count`] : [name]
    for (const n of names) series.set(n, { family: name, labels: n.endsWith('_bucket') ? [...labelNames, 'le'] : [...labelNames] })
  }
  return series
}

/** The label values a dashboard may match exactly, per label: those known in advance. */
const KNOWN_VALUES: Record<string, readonly string[]> = { event: OWNERSHIP_EVENTS, source: RESTORE_SOURCES, outcome: SNAPSHOT_OUTCOMES }

describe('the Grafana dashboard (examples/grafana/tidemark.json)', () => {
  it('queries only series the Prometheus adapter exports, by labels they have, and uses every series it exports', () => {
    const series = exportedSeries()
    expect(series.size).toBeGreaterThan(20)
    const used = new Set<string>()
    const problems: string[] = []
    for (const { where, expr } of expressions()) {
      const names = [...expr.matchAll(/\btidemark_[a-z_]+\b/g)].map((m) => m[0])
      if (names.length === 0) problems.push(`${where}: no tidemark series in ${expr}`)
      const labels = new Set<string>()
      for (const name of names) {
        const known = series.get(name)
        if (known === undefined) {
          problems.push(`${where}: ${name} is not a series of the adapter`)
          continue
        }
        used.add(known.family)
        for (const l of known.labels) labels.add(l)
      }
      // Grouping and matching labels, and label matchers inside selectors.
      for (const m of expr.matchAll(/\b(?:by|on|without|ignoring)\s*\(([^)]*)\)/g)) {
        for (const l of m[1]!.split(',').map((s) => s.trim()).filter(Boolean)) if (!labels.has(l)) problems.push(`${where}: label ${l} is on none of ${names.join(', ')}`)
      }
      for (const m of expr.matchAll(/([a-z_]+)\s*(=~|!~|!=|=)\s*"([^"]*)"/g)) {
        const [, label, op, value] = m as unknown as [string, string, string, string]
        if (!labels.has(label)) problems.push(`${where}: label ${label} is on none of ${names.join(', ')}`)
        const values = KNOWN_VALUES[label]
        if (values === undefined || value.includes('$')) continue
        for (const v of op === '=~' || op === '!~' ? value.split('|') : [value]) if (!values.includes(v)) problems.push(`${where}: ${label}="${v}" is not one of ${values.join(', ')}`)
      }
    }
    expect(problems).toEqual([])
    const families = new Set([...series.values()].map((s) => s.family))
    expect([...families].filter((f) => !used.has(f)), 'series the adapter exports that no panel shows').toEqual([])
  })

  it('imports as it is: every panel queries the $datasource variable, ids are unique, panels fit the 24-column grid', () => {
    const ids = dashboard.panels.map((p) => p.id)
    expect(new Set(ids).size).toBe(ids.length)
    expect(dashboard.templating.list.find((v) => v.name === 'datasource')).toMatchObject({ type: 'datasource', query: 'prometheus' })
    for (const p of dashboard.panels) {
      expect(p.gridPos.x + p.gridPos.w, p.title).toBeLessThanOrEqual(24)
      if (p.type === 'row') continue
      expect(p.datasource?.uid, p.title).toBe('${datasource}')
      expect(p.targets?.length, p.title).toBeGreaterThan(0)
    }
  })
})
