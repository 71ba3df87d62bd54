import { configDefaults, defineConfig } from 'vitest/config'
import { packageEntries } from './vitest.alias.js'
import { heavyFiles } from './vitest.heavy.js'

export default defineConfig({
  resolve: { alias: packageEntries },
  test: {
    include: ['test/**/*.test.ts'],
    // The slowest files run in test:group (vitest.heavy.ts).
    exclude: [...configDefaults.exclude, ...heavyFiles],
    // Starts radosgw and a Kafka mock (or uses TIDEMARK_S3_ENDPOINT /
    // TIDEMARK_KAFKA_BROKERS) and hands them to tests: test/helpers/services.ts.
    globalSetup: ['test/setup/services.ts'],
    // Makes a worker exit when the runner dies, instead of at its next report.
    setupFiles: ['test/setup/worker.ts'],
    // Child processes, not worker threads: classic-level and crash tests need
    // real processes.
    pool: 'forks',
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
