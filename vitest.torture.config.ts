import { defineConfig } from 'vitest/config'
import { packageEntries } from './vitest.alias.js'

// `npm run test:torture`: the kill, fault, corruption and disk-full suite of
// issue 10. Not part of `npm test` (its files end in .torture.ts); CI runs it
// with TORTURE_SCALE=ci. Prints one JSON line of figures at the end
// (test/torture/figures-setup.ts).
export default defineConfig({
  resolve: { alias: packageEntries },
  test: {
    include: ['test/torture/**/*.torture.ts'],
    globalSetup: ['test/setup/services.ts', 'test/torture/figures-setup.ts'],
    setupFiles: ['test/setup/worker.ts'],
    reporters: ['default', './test/torture/figures-reporter.ts'],
    pool: 'forks',
    // Two files at a time even on 2 cores: the kill loops mostly wait for
    // their child processes (and the Kafka mock's first fetch).
    maxWorkers: 2,
    testTimeout: 1_800_000,
    hookTimeout: 120_000,
    teardownTimeout: 30_000,
    retry: 0,
    env: {
      AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
    },
  },
})
