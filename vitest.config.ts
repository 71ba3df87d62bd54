import { availableParallelism } from 'node:os'
import { defineConfig } from 'vitest/config'
import { packageEntries } from './vitest.alias.js'

export default defineConfig({
  resolve: { alias: packageEntries },
  test: {
    include: ['test/**/*.test.ts'],
    // Starts radosgw and a Kafka mock (or uses TIDEMARK_S3_ENDPOINT /
    // TIDEMARK_KAFKA_BROKERS) and hands them to tests: test/helpers/services.ts.
    globalSetup: ['test/setup/services.ts'],
    // Makes a worker exit when the runner dies, instead of at its next report.
    setupFiles: ['test/setup/worker.ts'],
    // Child processes, not worker threads: classic-level and crash tests need
    // real processes.
    pool: 'forks',
    // Two files at a time even on 2 cores (vitest's default there is one):
    // most files wait on the Kafka mock's group rounds and on radosgw, not on
    // the CPU. Measured on 2 cores, Node.js 26: 631 s one at a time, 396 s two.
    maxWorkers: Math.max(2, availableParallelism() - 1),
    testTimeout: 60_000,
    hookTimeout: 120_000,
    teardownTimeout: 30_000,
    retry: 0,
    env: {
      // @aws-sdk warns once per process that Node 20 support ends in 2027.
      AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
    },
  },
})
