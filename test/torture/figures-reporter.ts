// Adds the run's outcome (tests passed and failed, and which failed) to the
// torture figures, so that figures of a run with failures say so: written
// as one more part into the directory that figures-setup.ts sums.
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Reporter, TestModule } from 'vitest/node'

export default class FiguresReporter implements Reporter {
  onTestRunEnd(modules: ReadonlyArray<TestModule>, _errors: unknown, reason: 'passed' | 'interrupted' | 'failed'): void {
    const dir = process.env.TORTURE_FIGURE_PARTS
    if (dir === undefined) return
    let passed = 0
    const failed: string[] = []
    for (const module of modules) {
      for (const test of module.children.allTests()) {
        const state = test.result().state
        if (state === 'passed') passed++
        else if (state === 'failed') failed.push(`${module.moduleId.split('/').pop()} > ${test.fullName}`)
      }
    }
    mkdirSync(dir, { recursive: true })
    writeFileSync(join(dir, `zz-run-result-${process.pid}-${Date.now()}.json`), JSON.stringify({ result: reason, testsPassed: passed, testsFailed: failed.length, failedTests: failed }))
  }
}
