// kafkajs over SASL_SSL with SCRAM-SHA-256 (tests/integration/test_security.py).
// node sasl_ssl_client.js BOOTSTRAP TOPIC CA_FILE USER PASSWORD COUNT
// Produces COUNT records (acks=all), reads them back with a consumer group and prints one JSON
// line: {"acked": [offset, ...], "consumed": [value, ...]}; a refused login prints
// {"error": "<kafkajs error name>: <message>"} and exits 1.
const fs = require("fs");
const { Kafka, logLevel } = require("kafkajs");

const [bootstrap, topic, caFile, username, password, countArg] = process.argv.slice(2);
const count = Number(countArg);

async function main() {
  const kafka = new Kafka({
    clientId: "kafkajs-sasl-ssl",
    brokers: bootstrap.split(","),
    logLevel: logLevel.NOTHING,
    ssl: { ca: [fs.readFileSync(caFile, "utf-8")], servername: "localhost" },
    sasl: { mechanism: "scram-sha-256", username, password },
    retry: { retries: 2, initialRetryTime: 200 },
  });
  const producer = kafka.producer();
  await producer.connect();
  const acked = [];
  for (let i = 0; i < count; i++) {
    const [meta] = await producer.send({ topic, acks: -1, messages: [{ value: `kafkajs-${i}` }] });
    acked.push(Number(meta.baseOffset));
  }
  await producer.disconnect();
  const consumer = kafka.consumer({ groupId: `kafkajs-${Date.now()}` });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const consumed = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("timed out consuming")), 60000);
    consumer.run({
      eachMessage: async ({ message }) => {
        consumed.push(message.value.toString());
        if (consumed.length >= count) {
          clearTimeout(timer);
          resolve();
        }
      },
    });
  });
  await consumer.disconnect();
  console.log(JSON.stringify({ acked, consumed }));
}

main().catch((e) => {
  console.log(JSON.stringify({ error: `${e.name}: ${e.message}` }));
  process.exit(1);
});
