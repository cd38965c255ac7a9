// kafkajs across a leader failover (tests/integration/test_cluster_failover.py).
// node failover_client.js BOOTSTRAP TOPIC COUNT GO_FILE
// Produces COUNT/2 records (idempotent, acks=all, one at a time), prints "HALF", waits for
// GO_FILE (the test kills the leader, then creates it), produces the rest with the same
// producer, then reads the topic from the start with a consumer group and prints one JSON
// line: {"acked": [[value, offset], ...], "consumed": [[offset, value], ...]}.
const fs = require("fs");
const { Kafka, logLevel } = require("kafkajs");

const [bootstrap, topic, countArg, goFile] = process.argv.slice(2);
const count = Number(countArg);

async function main() {
  const kafka = new Kafka({
    clientId: "kafkajs-failover",
    brokers: bootstrap.split(","),
    logLevel: logLevel.NOTHING,
    requestTimeout: 30000,
    retry: { retries: 30, initialRetryTime: 200, maxRetryTime: 2000 },
  });
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const acked = [];
  for (let i = 0; i < count; i++) {
    if (i === count / 2) {
      console.log("HALF");
      while (!fs.existsSync(goFile)) await new Promise((r) => setTimeout(r, 50));
    }
    const value = `kafkajs-${i}`;
    const [meta] = await producer.send({ topic, acks: -1, messages: [{ value }] });
    acked.push([value, Number(meta.baseOffset)]);
  }
  await producer.disconnect();
  const consumer = kafka.consumer({ groupId: `kafkajs-${Date.now()}`, retry: { retries: 30 } });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const consumed = [];
  await new Promise((resolve, reject) => {
    consumer
      .run({
        eachMessage: async ({ message }) => {
          consumed.push([Number(message.offset), message.value.toString()]);
          if (consumed.length >= count) resolve();
        },
      })
      .catch(reject);
  });
  await consumer.disconnect();
  console.log(JSON.stringify({ acked, consumed }));
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e && e.stack ? e.stack : String(e));
    process.exit(1);
  },
);
