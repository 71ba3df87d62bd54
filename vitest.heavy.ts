// Test files of `npm test` that run in `npm run test:group` instead: the
// slowest of the suite (measured on 2 cores, Node.js 26, one file at a
// time: 24-52 s each, about 180 s together), so that `npm test` stays
// under 10 minutes there. CI runs both (.ci/run).
export const heavyFiles = [
  'test/kafka-consumer/group.test.ts',
  'test/kafka-consumer/start.test.ts',
  'test/runtime/lifecycle.test.ts',
  'test/snapshot/s3.test.ts',
  'test/examples/demo.test.ts',
]
