// Dump prints the events of Beam's Nexmark generator, one a line, in the
// format of TestGeneratorIsBeams (bids without their padding, which Flink's
// channel and url draws change). With the jars of beam-sdks-java-nexmark
// 2.60.0, beam-sdks-java-core, beam-vendor-guava-32_1_2-jre, joda-time,
// jackson-core/-databind/-annotations, slf4j-api and checker-qual in lib/:
//
//	javac -cp 'lib/*' Dump.java && java -cp 'lib/*:.' Dump 100 20000 | sha256sum
import org.apache.beam.sdk.nexmark.NexmarkConfiguration;
import org.apache.beam.sdk.nexmark.sources.generator.*;
import org.apache.beam.sdk.nexmark.model.*;
public class Dump {
  public static void main(String[] a) {
    NexmarkConfiguration c = NexmarkConfiguration.DEFAULT.copy();
    c.numEventGenerators = 1;
    c.firstEventRate = Integer.parseInt(a[0]);
    c.nextEventRate = c.firstEventRate;
    long n = Long.parseLong(a[1]);
    long base = 1767225600000L; // 2026-01-01T00:00:00Z
    GeneratorConfig gc = new GeneratorConfig(c, base, 0, n, 0);
    Generator g = new Generator(gc);
    StringBuilder sb = new StringBuilder();
    while (g.hasNext()) {
      Generator.NextEvent ne = g.nextEvent();
      Event e = ne.event;
      if (e.newPerson != null) {
        Person p = e.newPerson;
        sb.append("P|").append(p.id).append('|').append(p.name).append('|').append(p.emailAddress).append('|').append(p.creditCard).append('|').append(p.city).append('|').append(p.state).append('|').append(p.dateTime.getMillis()).append('|').append(p.extra);
      } else if (e.newAuction != null) {
        Auction x = e.newAuction;
        sb.append("A|").append(x.id).append('|').append(x.itemName).append('|').append(x.description).append('|').append(x.initialBid).append('|').append(x.reserve).append('|').append(x.dateTime.getMillis()).append('|').append(x.expires.getMillis()).append('|').append(x.seller).append('|').append(x.category).append('|').append(x.extra);
      } else {
        Bid b = e.bid;
        sb.append("B|").append(b.auction).append('|').append(b.bidder).append('|').append(b.price).append('|').append(b.dateTime.getMillis());
      }
      sb.append('|').append(ne.eventTimestamp).append('\n');
    }
    System.out.print(sb);
  }
}
